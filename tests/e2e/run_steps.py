"""A `scalerl train` subprocess's logged steps, read while it runs (test_preemption.py,
test_torchrun_stops.py): the rows of metrics.jsonl that close a step, and a wait for one; and
`kill_group`, the SIGKILL of a run's whole process group that the SIGKILL + resume tests use."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

SHM_PREFIXES = ("psm_", "sem.mp-")
"""/dev/shm entries of torch's shared memory and multiprocessing's semaphores."""


def shm_names() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIXES)}


def mapped_shm() -> set[str]:
    """The /dev/shm entries some live process has mapped (another run's engine, still in use)."""
    names = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone, or not ours to read
            continue
        names |= {line.rsplit("/dev/shm/", 1)[1].strip() for line in maps.splitlines()
                  if "/dev/shm/" in line}
    return names


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL `proc`'s whole process group (W&B's service and vLLM's processes too) and wait for
    it. What a group SIGKILL leaves in /dev/shm (its resource tracker dies too) cannot be told
    apart from a concurrent run's live semaphores (unlinking by creation time took another
    test's run down), so test_last_line.py's leak check excuses `sem.mp-` beside xdist."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


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
