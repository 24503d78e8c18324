"""`scalerl score` on multi-turn rows (`"turns"`): the task's environment is replayed, its tool
calls really run in this machine's sandbox (bwrap here and in CI), and each row carries the
observations beside the verdict; malformed or misplaced turns are one-line errors."""

from __future__ import annotations

import json

import pytest

from scalerl.cli import main
from scalerl.envs.catalog import get_task


def score_rows(tmp_path, capsys, rows, *extra):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["score", str(src), "--out", str(out), *extra])
    got = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return code, got, capsys.readouterr().err


def sample_of(task: str = "arith_tool"):
    return get_task(task).samples("test")[0]


def test_a_tool_using_transcript_is_replayed_in_the_sandbox_and_judged(tmp_path, capsys):
    s = sample_of()
    a, b = s.prompt.rstrip("=").split("*")
    product = int(a) * int(b)
    rows = [  # the product computed in two calls (a variable kept between them), then answered
        {"id": 1, "task": "arith_tool", "sample_id": s.id,
         "turns": [f"```python\nx = {a} * {b}\n```output", "```python\nprint(x)\n```output",
                   f"The product is \\boxed{{{product}}}."]},
        {"id": 2, "task": "arith_tool", "sample_id": s.id,  # answered wrong after a traceback
         "turns": ["```python\nprint(y)\n```output", "\\boxed{12}"]},
    ]
    code, (right, wrong), err = score_rows(tmp_path, capsys, rows)
    assert code == 0, err
    assert (right["status"], right["turns_played"], right["ended"]) == ("correct", 3, "done")
    assert [c["status"] for c in right["tool_calls"]] == ["ok", "ok"]
    assert right["tool_calls"][1]["output"].strip() == str(product)  # x survived the first call
    assert [m["role"] for m in right["messages"]] == ["assistant", "tool", "assistant", "tool",
                                                      "assistant"]
    assert wrong["status"] == "wrong" and wrong["tool_calls"][0]["status"] == "error"
    assert "NameError" in wrong["tool_calls"][0]["output"]
    assert "NameError" in wrong["messages"][1]["content"]  # the model saw the traceback


def test_turns_after_the_episode_ended_are_not_played(tmp_path, capsys):
    s = sample_of()
    row = {"id": 1, "task": "arith_tool", "sample_id": s.id,
           "turns": [f"\\boxed{{{s.answer}}}", "```python\nprint(1)\n```output"]}
    code, (out,), err = score_rows(tmp_path, capsys, [row])
    assert code == 0, err
    assert (out["status"], out["turns_played"], out["ended"]) == ("correct", 1, "done")
    assert out["tool_calls"] == []


@pytest.mark.parametrize(("row", "says"), [
    ({"task": "arith", "turns": ["x"]}, "task 'arith' has no environment"),
    ({"task": "arith_tool", "turns": []}, '"turns" must be a non-empty list of strings'),
    ({"task": "arith_tool", "turns": [1]}, '"turns" must be a non-empty list of strings'),
    ({"kind": "math", "answer": "1", "turns": ["x"]}, 'a "turns" row needs "task"'),
])
def test_misplaced_or_malformed_turns_are_one_line(tmp_path, capsys, row, says):
    sample_id = get_task(row.get("task", "arith")).samples("test")[0].id
    code, got, err = score_rows(tmp_path, capsys, [{"id": 1, "sample_id": sample_id, **row}])
    assert code == 2 and got == []
    assert f"line 1: {says}" in err
