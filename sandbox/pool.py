"""Run many sandboxed programs at once with bounded concurrency and bounded queueing.

Covered: a thread per concurrent run (each run spends its time in the kernel or waiting on pipes,
so threads are enough), at most `max_workers` runs at once, `submit` blocking once `max_pending`
jobs are queued (back-pressure instead of unbounded memory), results in submission order from
`run_many`. Not covered: priorities, cancelling a run that already started (its wall limit ends
it), spreading runs over several machines.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from scalerl.sandbox.base import Backend, ExecResult, Limits


@dataclass(frozen=True)
class Job:
    """One program to run: the arguments of `Backend.run`."""

    argv: tuple[str, ...]
    stdin: bytes = b""
    files: Mapping[str, bytes] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    collect: tuple[str, ...] = ()


class SandboxPool:
    """`with SandboxPool(backend, max_workers=4) as pool: results = pool.run_many(jobs)`."""

    def __init__(self, backend: Backend, max_workers: int | None = None,
                 max_pending: int | None = None) -> None:
        self.backend = backend
        self.max_workers = (os.cpu_count() or 1) if max_workers is None else max_workers
        if self.max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {self.max_workers}")
        self._pending = threading.BoundedSemaphore(max_pending or 4 * self.max_workers)
        self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="sandbox")

    def submit(self, job: Job) -> Future[ExecResult]:
        """Queue one job; blocks while `max_pending` jobs are already queued or running."""
        self._pending.acquire()
        try:
            future = self._executor.submit(self._run, job)
        except BaseException:
            self._pending.release()
            raise
        future.add_done_callback(lambda _: self._pending.release())
        return future

    def _run(self, job: Job) -> ExecResult:
        return self.backend.run(list(job.argv), stdin=job.stdin, files=job.files,
                                limits=job.limits, collect=job.collect)

    def run_many(self, jobs: Iterable[Job]) -> list[ExecResult]:
        """Run every job (at most `max_workers` at once); results in the order of `jobs`."""
        return [f.result() for f in [self.submit(job) for job in jobs]]

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
