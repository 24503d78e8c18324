"""`scalerl train` on a multi-turn task (arith_tool: the python environment) beside a single-turn
one, in PipelineRL mode with a checkpoint every step, then `--resume`: the glue around the
episode loop (the tool sessions, the multi-turn metrics, the buffer's state with multi-turn
rollouts across a checkpoint).

The default tiny model was not warm-started on tool traces, so its episodes mostly end after one
turn; the token-level checks (observations appended untrained, exact deltas, budgets) are in
tests/rollout/test_episode*.py, and learning with the tool (the tiny-tools model, the
tiny-cpu-tools recipe) is measured in docs/measurements.md. Slow: two runs of the real engine.
"""

import sys
from pathlib import Path

import pytest
from e2e_runs import run_to_end, steps_of

pytestmark = pytest.mark.slow

SETS = ["checkpoint.every=1", "checkpoint.keep=3", "val.every=0", "offpolicy.mode=pipelinerl",
        "offpolicy.max_lag=1", "offpolicy.prompts_per_step=4", "offpolicy.rollouts_per_prompt=4",
        "filters.zero_variance=false", "log.progress=false", "log.trackers=[]",
        "tasks=[{name: arith_tool, budget: {answer: 64, total: 160}},"
        " {name: arith, budget: {thinking: 48, answer: 16}}]"]


def command(run_dir: Path, model: str, steps: int, resume: bool = False) -> list[str]:
    sets = [*SETS, f"steps={steps}", f"policy.model={model}"]
    return [sys.executable, "-m", "scalerl", "train", *[a for s in sets for a in ("--set", s)],
            "--run-dir", str(run_dir), *(["--resume"] if resume else [])]


def test_a_run_with_a_tool_task_trains_checkpoints_and_resumes(tmp_path, tiny_model_path):
    run_dir = tmp_path / "run"
    run_to_end(command(run_dir, tiny_model_path, 2))
    assert (run_dir / "checkpoints" / "step-000002").is_dir()
    run_to_end(command(run_dir, tiny_model_path, 3, resume=True))  # the buffer's state read back
    steps = steps_of(run_dir)
    assert sorted(steps) == [1, 2, 3], sorted(steps)
    for step, row in steps.items():
        assert row["rollout/turns_mean"] >= 1.0, (step, row["rollout/turns_mean"])
        assert row["rollout/tool_calls_mean"] >= 0.0
    tool_rows = [r for r in steps.values() if "train/arith_tool/turns_mean" in r]
    assert tool_rows, "no step trained on arith_tool's multi-turn rollouts"
    assert all("train/arith/turns_mean" not in r for r in steps.values())  # single-turn task
