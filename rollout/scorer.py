"""Streaming scoring: each completion is scored as soon as it finishes, beside generation.

A `Scorer` holds the run's Task objects and its `Grading` settings (the sandbox, the math pool's
size), both handed down by the glue: nothing here looks a task up in the global catalogue.
`submit(sample, completion)` hands the verdict to a thread pool (the task's verifier itself may
use the math process pool or the sandbox) and returns a Future. `Task.score` never raises (a
verifier that raises is `Score(status="error")`, envs/task.py), and a sample of a task the run
does not hold is an `error` verdict too: nothing escapes into the engine. Per-task latency (queue
+ verification) and status counts are recorded here. It does not generate.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from scalerl.envs.base import Sample, Score, truncate
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.task import Task

LOCAL_THREADS = 4
"""Verdicts at once when grading runs on this machine."""
CLUSTER_THREADS = 256
"""Threads (made only as needed) with `verifiers.cluster: ray`: each waits on one request, and the
grader bounds how many each actor runs (`verifiers.max_in_flight`), so enough to keep every
actor of a large cluster busy."""


class Scorer:
    """Scores completions of the run's tasks on a thread pool; records latency per task."""

    def __init__(self, tasks: Mapping[str, Task] | Iterable[Task],
                 grading: Grading = DEFAULT_GRADING, max_workers: int | None = None) -> None:
        items = tasks.values() if isinstance(tasks, Mapping) else tasks
        self.tasks: dict[str, Task] = {t.name: t for t in items}
        """The run's tasks by name (what prompts are rendered with and scored by)."""
        self.grading = grading
        if max_workers is None:
            local = grading.verifiers.cluster == "local"
            max_workers = LOCAL_THREADS if local else CLUSTER_THREADS
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="scorer")
        self._lock = threading.Lock()
        self._latency: dict[str, list[float]] = defaultdict(list)
        self._statuses: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def task(self, name: str) -> Task:
        """The run's task `name`; KeyError naming the tasks this scorer holds."""
        if name not in self.tasks:
            raise KeyError(f"task {name!r} is not one of this run's tasks: "
                           f"{', '.join(sorted(self.tasks)) or 'none'}")
        return self.tasks[name]

    def system_prompt(self, name: str) -> str | None:
        return self.task(name).system_prompt

    def submit(self, sample: Sample, completion: str) -> Future[Score]:
        """Score `completion` in the background; the Future never raises for verifier failures."""
        submitted = time.perf_counter()
        try:
            task = self.task(sample.task)
        except KeyError as exc:  # a task the run does not hold: an error Score, resolved at once
            fut: Future[Score] = Future()
            fut.set_result(Score("error", truncate(f"no task for sample {sample.id!r}: "
                                                   f"{exc.args[0]}")))
            return fut

        def work() -> Score:
            score = task.score(sample, completion, self.grading)  # never raises (envs/task.py)
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
