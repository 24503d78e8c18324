"""Streaming scoring: each completion is scored as soon as it finishes, beside generation.

`Scorer.submit(sample, completion)` hands the verdict to a thread pool (the task's verifier
itself may use the math process pool or the sandbox) and returns a Future. `Task.score` never
raises (a verifier that raises is `Score(status="error")`, envs/task.py), and an unknown task is
an `error` verdict too: nothing escapes into the engine. Per-task latency (queue + verification)
and status counts are recorded here. It does not generate.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from scalerl.envs.base import Sample, Score, reward_for, truncate
from scalerl.envs.catalog import get_task
from scalerl.envs.task import Task

TaskLookup = Callable[[str], Task]


class Scorer:
    """Scores completions on a thread pool; records latency per task."""

    def __init__(self, max_workers: int = 4, lookup: TaskLookup | None = None) -> None:
        self._lookup = lookup or get_task
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="scorer")
        self._lock = threading.Lock()
        self._latency: dict[str, list[float]] = defaultdict(list)
        self._statuses: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def submit(self, sample: Sample, completion: str) -> Future[Score]:
        """Score `completion` in the background; the Future never raises for verifier failures."""
        submitted = time.perf_counter()
        try:
            task = self._lookup(sample.task)
        except Exception as exc:  # unknown task: an error Score, resolved at once
            fut: Future[Score] = Future()
            fut.set_result(Score(status="error", reward=reward_for("error"),
                                 detail=truncate(f"no task for sample {sample.id!r}: {exc}")))
            return fut

        def work() -> Score:
            score = task.score(sample, completion)  # never raises (envs/task.py)
            with self._lock:
                self._latency[sample.task].append(time.perf_counter() - submitted)
                self._statuses[sample.task][score.status] += 1
            return score

        return self._pool.submit(work)

    def score(self, sample: Sample, completion: str) -> Score:
        """Blocking form of `submit`."""
        return self.submit(sample, completion).result()

    def latency(self) -> dict[str, dict[str, float]]:
        """Per task: count, mean, p50, p95 and max seconds from submission to verdict."""
        with self._lock:
            items = {k: sorted(v) for k, v in self._latency.items()}
        out = {}
        for task, xs in items.items():
            out[task] = {
                "n": len(xs), "mean_s": statistics.fmean(xs), "p50_s": xs[len(xs) // 2],
                "p95_s": xs[min(len(xs) - 1, int(0.95 * len(xs)))], "max_s": xs[-1],
            }
        return out

    def statuses(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._statuses.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
