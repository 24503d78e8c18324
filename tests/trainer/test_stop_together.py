"""A failure of rank 0's generator while it works alone (publishing a step's weights at once,
publishing before validation) reaches every rank from the same call, so that all ranks
checkpoint and stop together instead of rank 1 waiting for a batch that never comes. Two gloo
processes under torchrun (stop_worker.py), the loop's own functions."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "stop_worker.py"


def ranks(out: Path, mode: str) -> list[dict]:
    out.mkdir()
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(WORKER),
           str(out), mode]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> list[dict]:
    return ranks(tmp_path_factory.mktemp("stop") / "fail", "fail")


def test_a_failed_publish_after_a_step_reaches_every_rank(failing):
    for rank in failing:
        assert rank["hand_weights"] == {
            "type": "PublishError",
            "msg": "failed sending weights version 3: reload timed out"}


def test_a_failed_publish_before_validation_stops_every_rank(failing):
    for rank in failing:
        assert rank["validate"] == {
            "type": "PublishError",
            "msg": "failed sending weights version 3 before validating"}


def test_without_a_failure_no_rank_stops(tmp_path):
    assert ranks(tmp_path / "ok", "ok") == [{"hand_weights": None, "validate": None}] * 2


def test_a_stop_asked_on_one_rank_abandons_the_step_on_every_rank_with_nothing_updated(tmp_path):
    # 12 rows over 2 ranks in micro-batches of 1 row: 6 micro-batches each. Rank 1 asks from its
    # 2nd micro-batch on; the flag is agreed over the ranks before each micro-batch, so both
    # ranks stop there, before the optimizer step: weights, Adam moments and schedule are step
    # 1's, and the accumulated gradients are dropped.
    for rank in ranks(tmp_path / "abandon", "abandon"):
        assert rank == {"type": "StepAbandoned", "msg": "micro-batch 2 of 6", "asked": 2,
                        "lr_same": True, "weights_same": True, "optimizer_same": True,
                        "grads_cleared": True}
