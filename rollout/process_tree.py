"""Stopping the processes a command started: a vLLM engine's core and workers after a failed or
timed-out start (rollout/engine.py). SIGTERM first (vLLM's processes unlink their shared memory on
it), SIGKILL after a grace, then reaped. It does not start processes or decide when to stop them.
"""

from __future__ import annotations

import contextlib
import time


def child_pids() -> set[int]:
    """Every live descendant of this process."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def stop_processes(pids: set[int], grace_s: float) -> None:
    """SIGTERM `pids` (vLLM's processes clean up their shared memory on it), SIGKILL those still
    alive after `grace_s`, and reap them."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def stop_tree(before: set[int], grace_s: float) -> None:
    """Stop every descendant started since `before`, again until none is left: a process can
    start another while it is being stopped (an engine core spawning its worker), and an
    orphaned one stays a descendant when this process is a subreaper (scalerl/ending.py)."""
    deadline = time.monotonic() + grace_s
    while pids := child_pids() - before:
        stop_processes(pids, max(1.0, deadline - time.monotonic()))
        if time.monotonic() > deadline + 10:
            break
