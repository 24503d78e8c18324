"""A `scalerl train` subprocess's logged steps, read while it runs (test_preemption.py,
test_torchrun_stops.py): the rows of metrics.jsonl that close a step, and a wait for one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


def step_rows(run_dir: Path) -> list[dict]:
    """The metrics.jsonl rows written at the end of a step (they carry the batch's keys)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "batch/error_excluded_frac" in r]


def logged_steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in step_rows(run_dir)]


def wait_for_step(proc: subprocess.Popen, run_dir: Path, step: int,
                  timeout_s: float = 400) -> None:
    """Until `step` is logged; AssertionError when `proc` exits first (with its stderr's tail)
    or after `timeout_s`, when it is SIGKILLed (its whole group when it leads one: torchrun's
    workers too)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"train exited early ({proc.returncode}): "
                                 f"{proc.stderr.read()[-3000:]}")
        if logged_steps(run_dir) and max(logged_steps(run_dir)) >= step:
            return
        time.sleep(0.2)
    if os.getpgid(proc.pid) == proc.pid:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    raise AssertionError(f"step {step} not logged after {timeout_s} s")
