"""Held-out validation on a server of its own (`val.servers`) while training goes on.

Two real `scalerl train` runs of the tiny model (PPO-offpolicy-1, in-process engine, arith): A
validates on its training engine, every rank waiting; B hands each validation step's weights to
one of the session's vLLM servers and trains on. B's figures come in later, each logged at the
step it belongs to (`val/logged_at_step` after it for at least one), and they are A's: the same
weights (the runs are seeded alike) sampled with the same seeds on a server, which reproduces the
in-process engine's tokens. About 2 engine starts (~1.5 min) on the session's servers.
"""

import json
import sys
from pathlib import Path

import pytest
from e2e_runs import run_to_end

pytestmark = pytest.mark.slow

STEPS, EVERY = 4, 2


def command(run_dir: Path, model: str, *extra: str) -> list[str]:
    sets = [f"steps={STEPS}", f"val.every={EVERY}", "val.n=4", "val.limit=60",
            "checkpoint.every=0", "offpolicy.mode=ppo", "offpolicy.prompts_per_step=8",
            "offpolicy.rollouts_per_prompt=2", "filters.retire=false", "log.progress=false",
            "log.trackers=[]", f"policy.model={model}",
            "tasks=[{name: arith, budget: {thinking: 48, answer: 16}}]", *extra]
    return [sys.executable, "-m", "scalerl", "train", *[a for s in sets for a in ("--set", s)],
            "--run-dir", str(run_dir)]


def validations(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if "val/arith/pass@1" in r]
    assert len({r["step"] for r in val}) == len(val), "a validation was logged twice"
    return {r["step"]: r for r in val}


def test_validation_on_its_own_server_comes_in_later_at_its_own_step_with_the_same_figures(
        vllm_servers, tiny_model_path, tmp_path):
    blocking = tmp_path / "blocking"
    run_to_end(command(blocking, tiny_model_path))
    background = tmp_path / "background"
    run_to_end(command(background, tiny_model_path, f"val.servers=[{vllm_servers.urls[0]}]",
                       "engine.server_timeout_s=30"))

    a, b = validations(blocking), validations(background)
    assert sorted(a) == sorted(b) == [0, 2, 4]
    for step in (0, 2, 4):
        assert b[step]["val/arith/pass@1"] == a[step]["val/arith/pass@1"], step
        assert b[step]["val/arith/mean_length"] == a[step]["val/arith/mean_length"], step
        assert b[step]["val/logged_at_step"] >= step
        assert "val/logged_at_step" not in a[step]  # the blocking run logs it at once
    assert any(b[s]["val/logged_at_step"] > s for s in (0, 2)), b  # training went on meanwhile
    summary = json.loads((background / "summary.json").read_text())
    assert [v["step"] for v in summary["validations"]] == [0, 2, 4]

