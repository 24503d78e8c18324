"""`--tools python` on eval: the setting reaches the rollout cache key, results.json and
results.md (whether tools were on, and how), and the tasks handed to the generator."""

from __future__ import annotations

import argparse

import pytest

from scalerl.commands.engine_args import add_tool_args, with_tool_args
from scalerl.envs.catalog import get_task
from scalerl.envs.python_env import PythonEnvironment
from scalerl.evaluation.render import settings_lines
from scalerl.evaluation.report import EvalSettings


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tool_args(parser)
    return parser.parse_args(list(argv))


def test_tools_change_the_cache_key_and_say_so_in_the_report():
    plain = EvalSettings(tasks=("arith",), n=2)
    tools = EvalSettings(tasks=("arith",), n=2, tools="python", max_turns=4)
    chat = EvalSettings(tasks=("arith",), n=2, tools="python", max_turns=4, tool_format="chat")
    assert len({plain.key("arith"), tools.key("arith"), chat.key("arith")}) == 3
    assert "tools" not in plain.sampling("arith")  # a run without --tools keeps its old key
    assert plain.summary()["tools"] is None
    assert tools.summary()["tools"] == {"tool": "python", "max_turns": 4, "format": "auto"}
    off = "\n".join(settings_lines(plain.summary()))
    on = "\n".join(settings_lines(tools.summary()))
    assert "Tools: off" in off and "Tools: **python** on every task" in on
    assert "up to 4 assistant turns" in on and "`auto` convention" in on


def test_the_tool_flags_give_each_task_the_python_environment():
    tasks = {"arith": get_task("arith")}
    assert with_tool_args(parse(), tasks)["arith"] is tasks["arith"]  # no --tools: as is
    tooled = with_tool_args(parse("--tools", "python", "--max-turns", "2"), tasks)["arith"]
    assert isinstance(tooled.environment, PythonEnvironment)
    assert tooled.environment.max_turns == 2
    with pytest.raises(ValueError, match="--max-turns must be >= 1, got 0"):
        with_tool_args(parse("--tools", "python", "--max-turns", "0"), tasks)
    with pytest.raises(SystemExit):  # argparse's own one-line usage error
        parse("--tools", "bash")
