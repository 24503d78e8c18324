"""`Task`: the one base class of every task, built-in or a user's.

A task writes how it builds its splits (`build(split)`, or `build_splits()` when the splits are
made together) and, if its kind's verifier is not enough, how it judges a completion (`judge`).
The base class gives the rest once for all: `samples(split)` builds once, thread-safely, and
caches; `score(sample, completion)` never raises, turning a judge's exception or a non-Score into
an `error` verdict; `preflight()` says whether the verifier can work on this machine (the kind's
check unless the task has needs of its own). It reads no data itself and registers nothing
(envs/registry.py does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from scalerl.envs.base import Sample, Score, truncate
from scalerl.envs.environment import Environment
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.kinds import lookup_kind
from scalerl.envs.rows import Skipped

_FINAL = {"score": "judge", "samples": "build"}
"""Public methods a subclass may not override -> the hook to override instead."""
_LOCK_GUARD = threading.Lock()


class Task:
    """A task: a name, a kind, splits, samples per split, and a verdict on a completion.

    Subclasses set `name` and `kind` and override `build(split)` or `build_splits()`; `judge` is
    the kind's verifier with `verifier_options()` unless overridden. `samples` and `score` are
    final (defining either in a subclass is a TypeError).
    """

    name: str = ""
    kind: str = ""
    splits: tuple[str, ...] = ("train", "test")
    system_prompt: str | None = None
    requires_thinking: bool = False
    source: str = ""
    """Where the data comes from (a path, a package, a generator), shown by `scalerl tasks list`."""
    options: Mapping[str, Any] = MappingProxyType({})
    """Keyword options for the kind's verifier (e.g. `boxed_only`, `test_timeout_s`)."""
    declared_sizes: Mapping[str, int] | None = None
    """Split sizes known without reading the data (a hub benchmark's, from its dataset card):
    `scalerl tasks list` shows these instead of downloading; None: read the data to count."""
    revision: str | None = None
    """The hub commit a hub-backed task reads its rows at (None: not read from the hub)."""
    duplicates: int = 0
    """Rows merged into an earlier one (same problem and gold) when the data was loaded."""
    skipped: Skipped | None = None
    """Rows left out as unusable when the data was loaded (envs/rows.py); None: not loaded,
    or the task reads no rows."""
    environment: Environment | None = None
    """The multi-turn environment that answers each assistant turn (a tool's output, test
    feedback; envs/environment.py); None: single-turn. The verdict is still `judge`'s."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for final, hook in _FINAL.items():
            if final in cls.__dict__:
                raise TypeError(f"{cls.__name__}: override {hook}(), not {final}()")

    def __new__(cls, *args: Any, **kwargs: Any) -> Task:
        if cls.build is Task.build and cls.build_splits is Task.build_splits:
            raise TypeError(f"{cls.__name__} must override build(split) or build_splits()")
        return super().__new__(cls)

    # --- hooks: what a task writes ---------------------------------------------------------------
    def build(self, split: str) -> Sequence[Sample]:
        """The samples of one split (called once per split, with a valid split name)."""
        raise NotImplementedError(f"{type(self).__name__} does not override build(split)")

    def build_splits(self) -> Mapping[str, Sequence[Sample]]:
        """Every split's samples at once (override when splits are made together, e.g. with leak
        checks between them); the default calls `build` for each split in `self.splits`."""
        return {split: self.build(split) for split in self.splits}

    def judge(self, sample: Sample, completion: str, grading: Grading) -> Score:
        """Verdict on `completion` for `sample`: the kind's verifier, with `verifier_options()`
        and the run's `grading` settings (its sandbox, the math pool's size). May raise: `score`
        turns an exception into an `error` verdict."""
        return lookup_kind(self.kind).score(sample, completion, self.verifier_options(), grading)

    def with_data(self, path: str) -> Task:
        """This task reading its rows from `path` (a local copy in its source's schema: `--data
        NAME=PATH`, a run config's `data:`). Default: a ValueError naming the task, for tasks
        that read no data file (synthetic ones); data-backed tasks override it."""
        raise ValueError(f"task {self.name!r} reads no data file, so --data/data: cannot give it "
                         "a local copy (built-in benchmarks, training sets and task specs can)")

    def with_revision(self, revision: str) -> Task:
        """This task reading its hub dataset at `revision` (`--revision NAME=REV`, a run
        config's `revision:`). Default: a ValueError naming the task, for tasks not read from
        the hub; the built-in benchmarks and training sets override it."""
        raise ValueError(f"task {self.name!r} is not read from the hub, so --revision/revision: "
                         "cannot pin it (the built-in benchmarks and training sets can)")

    def verifier_options(self) -> dict[str, Any]:
        return {"requires_thinking": self.requires_thinking, **self.options}

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        """None when this task's verifier can work on this machine with the run's `grading`
        settings, else one line saying what is missing and the fix. Default: the kind's
        `preflight` with `verifier_options()`; a task whose `judge` needs more (a binary, a
        service, a data directory) overrides this. Options the kind does not know are refused
        here first; then the task's environment's own `preflight` (a server that must answer)."""
        kind, options = lookup_kind(self.kind), self.verifier_options()
        problem = kind.options_problem(options)
        if problem is None and kind.preflight is not None:
            problem = kind.preflight(options, grading)
        if problem is None and self.environment is not None:
            problem = self.environment.preflight()
        return problem

    # --- final: what every task gets -------------------------------------------------------------
    def samples(self, split: str) -> tuple[Sample, ...]:
        """All samples of `split`, built once (thread-safe) and cached; a ValueError naming the
        valid splits for an unknown one."""
        self.check_split(split)
        return self._built()[split]

    def score(self, sample: Sample, completion: str, grading: Grading = DEFAULT_GRADING) -> Score:
        """Verdict on `completion` for `sample` under the run's `grading` settings (default: this
        machine's). Never raises: a judge that raises or returns something other than a Score
        gives `error`, naming the task and what went wrong."""
        start = time.perf_counter()
        try:
            verdict = self.judge(sample, completion, grading)
        except Exception as exc:  # a broken verifier is a status, never a crash or a silent wrong
            detail = f"task {self.name!r}: judge raised {type(exc).__name__}: {exc}"
            return Score("error", truncate(detail), time.perf_counter() - start)
        if not isinstance(verdict, Score):
            detail = f"task {self.name!r}: judge returned {type(verdict).__name__}, not a Score"
            return Score("error", detail, time.perf_counter() - start)
        return verdict

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(
                f"task {self.name!r} has no split {split!r}; valid: {', '.join(self.splits)}"
            )

    def _built(self) -> dict[str, tuple[Sample, ...]]:
        """Samples by split, built on first use. Subclasses need not call
        `Task.__init__`, so the lock is made here, under a module-wide guard."""
        built = self.__dict__.get("_task_built")
        if built is not None:
            return built
        with _LOCK_GUARD:
            lock = self.__dict__.setdefault("_task_lock", threading.Lock())
        with lock:  # built once, even when several threads ask at once
            built = self.__dict__.get("_task_built")
            if built is None:
                built = self.__dict__["_task_built"] = self._build_all()
        return built

    def _build_all(self) -> dict[str, tuple[Sample, ...]]:
        made = self.build_splits()
        missing = [s for s in self.splits if s not in made]
        if missing:
            raise ValueError(f"task {self.name!r}: build_splits() gave no {', '.join(missing)} "
                             f"split; splits: {', '.join(self.splits)}")
        return {s: tuple(made[s]) for s in self.splits}
