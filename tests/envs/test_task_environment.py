"""A task's environment, set the three ways tasks register: spec keys (`tools`, `feedback`,
`max_turns`, `max_observation_chars`, one-line errors naming the key), a `@register_task` class
attribute, and a `scalerl.tasks` entry point."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
import yaml

from scalerl.envs import catalog
from scalerl.envs.catalog import get_task
from scalerl.envs.environment import environment_factory
from scalerl.envs.python_env import PythonEnvironment
from scalerl.envs.spec import SpecError, environment_from_spec, register_spec_file
from scalerl.envs.task import Task


def _spec(tmp_path, name: str, **keys) -> object:
    (tmp_path / "rows.jsonl").write_text("".join(
        json.dumps({"prompt": f"{i}*{i}=", "answer": str(i * i)}) + "\n" for i in range(20)))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "kind": "math", "data": "rows.jsonl", **keys}))
    return path


def test_tools_python_gives_the_python_environment_with_the_specs_limits(tmp_path):
    path = _spec(tmp_path, "squares_tool", tools=["python"], max_turns=4,
                 max_observation_chars=300)
    assert register_spec_file(path) == ["squares_tool"]
    task = get_task("squares_tool")
    assert isinstance(task.environment, PythonEnvironment)
    assert (task.environment.max_turns, task.environment.max_observation_chars) == (4, 300)
    assert task.with_data(str(tmp_path / "rows.jsonl")).environment is task.environment


def test_a_spec_without_environment_keys_is_single_turn(tmp_path):
    register_spec_file(_spec(tmp_path, "squares_plain"))
    assert get_task("squares_plain").environment is None


@pytest.mark.parametrize(("keys", "says"), [
    ({"tools": ["bash"]}, "tool 'bash': write it as package.module:name (or a built-in: python)"),
    ({"tools": ["nosuchpkg.tools:f"]}, "tool 'nosuchpkg.tools:f': cannot import it "
                                       "(ModuleNotFoundError"),
    ({"tools": "python"}, "'tools' must be a list of tools: built-in names (python) or "
                          "package.module:function, got 'python'"),
    ({"tools": ["python"], "max_turns": 0}, "max_turns must be an integer >= 1, got 0"),
    ({"tools": ["python"], "max_turns": True}, "'max_turns' must be an integer >= 1, got True"),
    ({"tools": ["python"], "max_observation_chars": 5},
     "max_observation_chars must be an integer >= 64, got 5"),
    ({"max_turns": 3}, "'max_turns' needs tools:, feedback: or environment: (a multi-turn "
                       "task)"),
    ({"feedback": "tests"}, "'feedback: tests' needs kind 'code'"),
    ({"feedback": "lint"}, "'feedback' must be one of tests; got 'lint'"),
    ({"tools": ["python"], "feedback": "tests"}, "'tools' and 'feedback' cannot both be set"),
])
def test_bad_environment_keys_are_one_line_naming_the_key(tmp_path, keys, says):
    with pytest.raises(SpecError) as info:
        register_spec_file(_spec(tmp_path, "bad_env", **keys))
    message = str(info.value)
    assert "\n" not in message and "bad_env.yaml: task #1 (bad_env): " in message
    assert says in message


def test_feedback_tests_on_a_code_task_looks_up_the_tests_feedback_environment():
    env = environment_from_spec({"kind": "code", "feedback": "tests", "max_turns": 2})
    assert type(env) is environment_factory("tests_feedback") and env.max_turns == 2


def test_a_register_task_class_sets_its_environment(tmp_path):
    (tmp_path / "tool_tasks.py").write_text(
        "from scalerl.envs import Sample, Task, register_task\n"
        "from scalerl.envs.python_env import PythonEnvironment\n\n"
        "@register_task('squares_decorated')\nclass Squares(Task):\n    kind = 'math'\n"
        "    environment = PythonEnvironment(max_turns=2)\n\n"
        "    def build(self, split):\n"
        "        return [Sample(id='1', task=self.name, prompt='12*12=', answer='144')]\n")
    assert register_spec_file(tmp_path / "tool_tasks.py") == ["squares_decorated"]
    assert get_task("squares_decorated").environment.max_turns == 2


def test_an_entry_point_plugin_task_keeps_its_environment(tmp_path, monkeypatch):
    (tmp_path / "tool_plugin_mod.py").write_text(
        "from scalerl.envs import Sample, Task\n"
        "from scalerl.envs.python_env import PythonEnvironment\n\n"
        "class Cubes(Task):\n    kind = 'math'\n"
        "    environment = PythonEnvironment(max_turns=5)\n\n"
        "    def build(self, split):\n"
        "        return [Sample(id='1', task=self.name, prompt='3**3=', answer='27')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = metadata.EntryPoint(name="cubes_plugin", value="tool_plugin_mod:Cubes",
                             group=catalog.ENTRY_POINT_GROUP)
    monkeypatch.setattr(catalog.metadata, "entry_points",
                        lambda group: [ep] if group == catalog.ENTRY_POINT_GROUP else [])
    catalog.load_entry_points()
    task = get_task("cubes_plugin")
    assert isinstance(task, Task) and task.environment.max_turns == 5


def test_builtin_arith_tool_and_single_turn_tasks():
    assert isinstance(get_task("arith_tool").environment, PythonEnvironment)
    assert get_task("arith").environment is None


def test_a_spec_code_task_with_feedback_runs_its_public_tests_as_its_judge_does(tmp_path):
    """The spec's feedback environment carries the task's verifier options (its comparison
    rule and limits), so `start` works as `with_feedback`'s does, with no options in the
    context."""
    from scalerl.envs.base import Sample
    from scalerl.envs.environment import EnvContext
    from scalerl.envs.spec import task_from_entry

    task = task_from_entry({"name": "spec_code_fb", "kind": "code", "data": "rows.jsonl",
                            "feedback": "tests", "max_turns": 2, "requires_thinking": True})
    assert task.environment.verifier_options == task.verifier_options()
    assert task.environment.verifier_options["requires_thinking"] is True
    sample = Sample(id="1", task="spec_code_fb", prompt="p", tests={"stdio": []})
    assert task.environment.start(sample, EnvContext())["grading"] is not None
