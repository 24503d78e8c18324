"""`scalerl score` on multi-turn rows in the `chat` convention against a user's own tools
(tests/user_tools.py, registered by a task spec passed with `--spec`): a function tool called with
JSON arguments (its output is the observation), a call with bad arguments (an error observation,
the row still judged), a stateful tool class and a TRL-style class, each row's verdict and
graded credit in the output."""

from __future__ import annotations

import json

import pytest
import yaml

from scalerl.cli import main
from scalerl.envs import catalog, registry
from scalerl.envs.catalog import get_task
from scalerl.envs.spec import register_spec_file


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """The spec's tasks are registered for this test only."""
    catalog.task_names()
    for table in ("_TASKS", "_INSTANCES"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def spec(tmp_path) -> str:
    (tmp_path / "sums.jsonl").write_text("".join(
        json.dumps({"prompt": f"What is {i} + 20?", "answer": str(i + 20)}) + "\n"
        for i in range(10, 30)))
    tasks = [{"name": "adder", "kind": "math", "data": "sums.jsonl",
              "tools": ["user_tools:add"], "max_turns": 3},
             {"name": "counter", "kind": "math", "data": "sums.jsonl",
              "environment": {"class": "user_tools:Counter"}},
             {"name": "game", "kind": "math", "data": "sums.jsonl",
              "environment": {"class": "user_tools:Game"}, "max_turns": 4}]
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tasks": tasks}))
    return str(path)


def score(tmp_path, capsys, rows):
    spec_path = spec(tmp_path)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["score", str(src), "--out", str(out), "--tool-format", "chat",
                 "--spec", spec_path])
    got = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return code, got, capsys.readouterr().err


def test_user_tools_in_the_chat_convention_are_replayed_and_judged(tmp_path, capsys):
    register_spec_file(spec(tmp_path))
    s = next(x for x in get_task("adder").samples("test"))
    a = int(s.prompt.split()[2])
    rows = [
        {"id": 1, "task": "adder", "sample_id": s.id,
         "turns": [call("add", a=a, b=20), f"So \\boxed{{{a + 20}}}."]},
        {"id": 2, "task": "adder", "sample_id": s.id,  # bad arguments, then a wrong answer
         "turns": [call("add", a=a, b="twenty"), "\\boxed{0}"]},
        {"id": 3, "task": "counter", "sample_id": s.id,
         "turns": [call("bump", by=4) + call("bump", by=2), "Done."]},
        {"id": 4, "task": "game", "sample_id": s.id,
         "turns": [call("guess", number=a + 19), call("guess", number=a + 20), "I won."]},
    ]
    code, (right, bad, counter, game), err = score(tmp_path, capsys, rows)
    assert code == 0, err
    assert (right["status"], right["reward"], right["ended"]) == ("correct", 1.0, "done")
    assert right["tool_calls"][0] | {"latency_s": 0} == {
        "turn": 0, "name": "add", "arguments": {"a": a, "b": 20}, "status": "ok",
        "output": json.dumps({"sum": a + 20}), "latency_s": 0, "truncated": False}
    assert right["messages"][1] == {"role": "tool", "content": json.dumps({"sum": a + 20})}
    assert bad["status"] == "wrong" and bad["tool_calls"][0]["status"] == "error"
    assert "b: 'twenty' is not of type 'integer'" in bad["messages"][1]["content"]
    # the stateful class's own reward (6 of 10) is the verdict: graded, placed between -1 and +1
    assert (counter["status"], counter["credit"]) == ("wrong", 0.6)
    assert counter["reward"] == pytest.approx(-1 + 0.6 * 2, abs=1e-12)
    assert [c["output"] for c in counter["tool_calls"]] == ["4", "6"]
    assert game["opening"][0]["content"].startswith(" Guess a number")
    assert (game["status"], game["credit"], game["turns_played"]) == ("correct", 1.0, 2)
    assert [c["output"] for c in game["tool_calls"]] == ["higher", "right"]
