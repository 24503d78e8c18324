"""`scalerl generate`: one-line argument errors (no engine); rows and summary (session engine)."""

import json

import pytest

from scalerl.cli import main
from scalerl.commands.generate import write_rollouts
from scalerl.envs.catalog import get_task
from scalerl.rollout.types import Budget

REQUIRED = {"sample_id", "task", "completion", "token_ids", "logprobs", "finish_reason",
            "thinking_tokens", "answer_tokens", "policy_version", "status", "interrupted"}


@pytest.mark.parametrize("argv,message", [
    (["--model", "tiny", "--task", "no-such-task"], "unknown task 'no-such-task'"),
    (["--task", "arith"], "--model is required (or --server URL: the server says what it serves)"),
    (["--model", "/nonexistent", "--task", "arith"], "no config.json there"),
    (["--model", "tiny", "--task", "arith", "--thinking-budget", "x"], "expected A or A:B"),
    (["--model", "tiny", "--task", "arith", "--split", "nope"], "no split 'nope'"),
    (["--model", "tiny", "--task", "arith", "--n", "0"], "--n and --limit must be > 0"),
    (["--model", "tiny", "--task", "arith", "--max-model-len", "999999"],
     "--max-model-len 999999 exceeds the context length of"),
    (["--model", "tiny", "--task", "arith", "--answer-budget", "0"], "Budget.answer must be > 0"),
    (["--model", "tiny", "--task", "arith_tool", "--tools", "python"],
     "task 'arith_tool' already has an environment"),
    (["--model", "tiny", "--task", "arith", "--tools", "python", "--max-turns", "0"],
     "--max-turns must be >= 1, got 0"),
])
def test_bad_arguments_fail_in_one_line(argv, message, tmp_path, capsys):
    assert main(["generate", *argv, "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.slow
def test_rows_and_summary_through_the_engine(engine, tmp_path):
    samples = list(get_task("arith").samples("test"))[:6]
    out = tmp_path / "rollouts.jsonl"
    summary = write_rollouts(engine, samples, out_path=str(out), n=2,
                             budget=Budget(thinking=(4, 8), answer=32), temperature=1.0, seed=0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 == summary["rollouts"]
    assert all(row.keys() >= REQUIRED for row in rows)
    assert all(len(r["token_ids"]) == len(r["logprobs"]) for r in rows)
    assert summary["interrupted_frac"] + summary["truncated_frac"] >= 0.9
    assert summary["pass_rate"] == sum(r["status"] == "correct" for r in rows) / 12
    assert summary["tokens_per_s"] > 0 and summary["engine_memory_mb"]["total_mb"] > 0
    assert "reward" not in rows[0]  # a verdict has no reward: the trainer maps it
    assert summary["interrupted_frac"] == sum(r["interrupted"] for r in rows) / 12
