"""SandboxPool: bounded concurrency, results in order, back-pressure, errors surface."""

from __future__ import annotations

import threading
import time

import pytest

from scalerl.sandbox import ExecResult, Limits
from scalerl.sandbox.base import Backend
from scalerl.sandbox.pool import Job, SandboxPool


class _CountingBackend(Backend):
    """Records how many runs overlap; a stand-in only for counting (the real runs are tested
    in test_pool_runs_real_programs_in_order)."""

    name = "counting"

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    @classmethod
    def available(cls):
        return True, ""

    def run(self, argv, *, stdin=b"", files=None, limits=Limits(), collect=()):  # noqa: B008
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(0.02)
        with self.lock:
            self.active -= 1
        if argv[0] == "boom":
            raise ValueError("bad job")
        return ExecResult(status="ok", stdout=stdin)


def test_pool_never_exceeds_max_workers():
    backend = _CountingBackend()
    with SandboxPool(backend, max_workers=3) as pool:
        results = pool.run_many([Job(("x",), stdin=bytes([i])) for i in range(20)])
    assert backend.peak == 3
    assert [r.stdout for r in results] == [bytes([i]) for i in range(20)]


def test_pool_surfaces_backend_errors():
    with SandboxPool(_CountingBackend(), max_workers=2) as pool:
        future = pool.submit(Job(("boom",)))
        with pytest.raises(ValueError, match="bad job"):
            future.result()


def test_pool_rejects_zero_workers():
    with pytest.raises(ValueError, match="max_workers"):
        SandboxPool(_CountingBackend(), max_workers=0)


def test_pool_runs_real_programs_in_order(secure_backend):
    jobs = [Job(("python", "-c", "import sys; print(int(sys.stdin.read()) ** 2)"),
                stdin=str(i).encode()) for i in range(8)]
    with SandboxPool(secure_backend, max_workers=2) as pool:
        results = pool.run_many(jobs)
    assert [r.stdout for r in results] == [f"{i * i}\n".encode() for i in range(8)]
