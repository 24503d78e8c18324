"""`scalerl eval --log-with wandb,trackio`: the results of each checkpoint, one step each, and the
results table, in W&B (offline) and trackio (a local store), read back from their own files.

The rollouts come from the eval cache (as an earlier, interrupted eval left them), so no engine
starts: the command is run whole, as a user types it.
"""

import json
import subprocess
import sys

import pytest
from test_eval import fill_cache, make_checkpoint
from tracked import offline_env, trackio_logs, trackio_runs, wandb_runs, wandb_table

from scalerl.cli import build_parser
from scalerl.commands.eval import prepare
from scalerl.evaluation.tracking import steps_of


def test_eval_sends_each_checkpoint_and_the_results_table_to_wandb_and_trackio(tmp_path):
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tmp_path / "run"), "--tasks", "arith", "--n", "2",
            "--k", "1,2", "--limit", "3", "--out", str(out)]
    for step in (5, 10):
        make_checkpoint(tmp_path / "run" / "checkpoints" / f"step-{step}")
    plan = prepare(build_parser("eval").parse_args(argv), (1, 2))
    for ref, statuses in zip(plan.models, (["wrong"], ["correct", "wrong", "wrong"]),
                             strict=True):
        fill_cache(out, ref.path, plan.settings, statuses)
    env = offline_env(tmp_path, home=True)
    done = subprocess.run([sys.executable, "-m", "scalerl", *argv, "--log-with", "wandb,trackio"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in done.stderr
    results = json.loads((out / "results.json").read_text())
    expected = {e["step"]: e["tasks"]["arith"]["pass@1"] for e in results["models"]}
    assert expected == {5: 0.0, 10: pytest.approx(1 / 3)}

    (run,) = wandb_runs(out)
    assert [h["_step"] for h in run["history"]] == [5, 10]
    assert {h["_step"]: h["eval/arith/pass@1"] for h in run["history"]} == expected
    assert run["history"][1]["eval/pass@2"] == pytest.approx(1 / 3)
    table = wandb_table(run, run["history"][1], "eval/results")
    assert table["columns"][:5] == ["model", "step", "task", "pass@1", "pass@2"]
    assert [(r[1], r[2]) for r in table["data"]] == [(5, "arith"), (5, "overall"),
                                                      (10, "arith"), (10, "overall")]
    assert run["config"]["eval.n"] == 2 and run["tags"] == ["eval"]

    trackio = tmp_path / "trackio"
    assert trackio_runs(trackio, "scalerl") == ["out"]  # the --out folder names the eval
    logs = trackio_logs(trackio, "scalerl", "out")
    assert [r["step"] for r in logs] == [5, 10]
    assert len(logs[1]["eval/results"]["_value"]) == 4

    again = subprocess.run([sys.executable, "-m", "scalerl", *argv, "--log-with", "trackio"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["step"] for r in trackio_logs(trackio, "scalerl", "out")] == [5, 10]  # not twice


def test_checkpoints_without_increasing_steps_go_by_position():
    assert steps_of([{"step": 2}, {"step": 7}]) == [2, 7]
    assert steps_of([{"step": 6}, {"step": 6}]) == [0, 1]  # two runs' step-6 checkpoints
    assert steps_of([{"step": None}, {"step": 3}]) == [0, 1]


def test_log_with_names_accelerates_trackers(capsys):
    from scalerl import cli

    assert cli.main(["eval", "--rollouts", "x.jsonl", "--log-with", "wandb,neptune"]) == 2
    assert "--log-with 'wandb,neptune': allowed: aim, clearml" in capsys.readouterr().err
