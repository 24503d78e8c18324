"""A task played with an environment it does not have itself (envs/played.py): `with_tools`
(`--tools python`) and test feedback's wrapper keep the task's name, samples and judge."""

from __future__ import annotations

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.code.feedback import FeedbackTask, with_feedback
from scalerl.envs.played import TOOL_INSTRUCTION, PlayedTask, with_tools
from scalerl.envs.python_env import PythonEnvironment


def test_with_tools_keeps_the_task_and_adds_the_python_environment():
    arith = get_task("arith")
    tooled = with_tools(arith, max_turns=5)
    assert isinstance(tooled, PlayedTask) and isinstance(tooled.environment, PythonEnvironment)
    assert tooled.environment.max_turns == 5 and arith.environment is None  # not mutated
    assert (tooled.name, tooled.kind, tooled.splits) == (arith.name, arith.kind, arith.splits)
    assert tooled.samples("test") == arith.samples("test")
    sample = arith.samples("test")[0]
    right = f"<think>x</think> \\boxed{{{sample.answer}}}"  # arith wants thinking first
    assert tooled.score(sample, right).status == "correct"
    assert tooled.score(sample, "<think>x</think> \\boxed{-1}").status == "wrong"
    assert tooled.system_prompt.endswith(TOOL_INSTRUCTION)
    if arith.system_prompt:
        assert tooled.system_prompt.startswith(arith.system_prompt)
    assert "python tool, up to 5 turns" in tooled.source


@pytest.mark.parametrize(("name", "tool", "says"), [
    ("arith_tool", "python", "already has an environment"),
    ("arith", "bash", "unknown tool 'bash'; valid: python"),
])
def test_with_tools_refuses_in_one_line(name, tool, says):
    with pytest.raises(ValueError, match=says) as info:
        with_tools(get_task(name), tool)
    assert "\n" not in str(info.value)


def test_feedback_is_a_played_task_whose_data_copy_keeps_the_feedback(tmp_path):
    task = with_feedback(get_task("synth_code"), max_turns=2)
    assert isinstance(task, FeedbackTask) and isinstance(task, PlayedTask)
    assert task.environment.max_turns == 2 and task.name == "synth_code"
    assert "test feedback, up to 2 answers" in task.source
    rewrapped = task.rewrap(get_task("synth_code"))
    assert type(rewrapped) is FeedbackTask and rewrapped.environment is task.environment
