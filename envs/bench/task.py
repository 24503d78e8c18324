"""The table of built-in benchmarks and training sets, and `HubTask`, the task each one is.

A `Benchmark` says where a dataset lives on the hub (envs/bench/hub.py), how many rows its card
declares, how a row becomes a Sample (its prompt, gold answer or tests), how it is graded and
what it is for: a held-out `benchmark` (split `test` only) or a `train`ing set (split `train`,
plus a small `test` split held out by prompt hash, as envs/data.py splits task files).
`register_benchmark` adds one to `BENCHMARKS` and registers its task name; `HubTask` reads the
rows (hub or a local copy, `with_data`), maps them, deduplicates by normalised prompt and checks
in its preflight that the data can be had here. Nothing here knows a benchmark's columns (the
modules beside it register theirs) or how to score (the `math` and `code` kinds do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from scalerl.envs.base import Sample
from scalerl.envs.bench.hub import HubSource, availability_problem, read_rows
from scalerl.envs.data import DataError, assign_splits, check_fractions, prompt_key
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.kinds import lookup_kind
from scalerl.envs.registry import add_task
from scalerl.envs.task import Task

RowMapper = Callable[[Mapping[str, Any], str], Sample]
"""to_sample(row, task name) -> Sample; raises ValueError saying what is wrong with the row."""
ROLES = ("benchmark", "train")


@dataclass(frozen=True)
class Benchmark:
    """One built-in dataset: where it is, what a row means, how it is graded."""

    name: str
    """Task name (`scalerl tasks list`), e.g. `math500`."""
    kind: str
    """`math` or `code`: the verifier that grades it."""
    source: HubSource
    """The hub copy the field uses (id, config, split or files)."""
    size: int
    """Rows the dataset card declares (what `tasks list` shows before any download)."""
    to_sample: RowMapper
    """Row (in the hub's schema) -> Sample with prompt, gold and `meta["problem"]`."""
    grading: str
    """The grading rule in a few words, for `tasks list` and the docs."""
    role: Literal["benchmark", "train"] = "benchmark"
    """`benchmark`: held out, split `test` only; `train`: a training set (`train` + `test`)."""
    heldout_fraction: float = 0.02
    """A training set's rows held out as its `test` split, by prompt hash (envs/data.py)."""
    system_prompt: str | None = None
    """None: the kind's default."""
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Verifier options of the kind (e.g. a code benchmark's per-test time limit)."""
    size_exact: bool = True
    """False when the card gives the size only roughly (shown as ~N)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Benchmark {self.name}: role must be one of {ROLES}, "
                             f"got {self.role!r}")
        if not self.name or ":" in self.name:
            raise ValueError(f"Benchmark name {self.name!r} must be non-empty without ':'")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"Benchmark {self.name}: size must be an integer >= 1, "
                             f"got {self.size!r}")
        check_fractions(self.heldout_fraction, 0.0)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("test",) if self.role == "benchmark" else ("train", "test")


BENCHMARKS: dict[str, Benchmark] = {}
"""Every built-in benchmark and training set, by task name (one table: envs/bench/*.py add)."""


def register_benchmark(bench: Benchmark) -> Benchmark:
    """Add `bench` to `BENCHMARKS` and register its task (a `HubTask` reading the hub copy)."""
    if bench.name in BENCHMARKS:
        raise ValueError(f"benchmark {bench.name!r} is already registered")
    BENCHMARKS[bench.name] = bench
    add_task(bench.name, lambda: HubTask(bench))
    return bench


class HubTask(Task):
    """A built-in benchmark or training set: rows from the hub (or a local copy) -> Samples."""

    def __init__(self, bench: Benchmark, *, name: str | None = None, data: str | None = None,
                 keep: Callable[[Mapping[str, Any]], bool] | None = None,
                 label: str = "") -> None:
        self.bench = bench
        self.name = name or bench.name
        self.kind = bench.kind
        self.splits = bench.splits
        self.options = bench.options
        self.data = data
        """A local copy in the hub's schema (None: the hub, through its cache)."""
        self.keep = keep
        """Rows to keep (e.g. a LiveCodeBench window); None: every row."""
        self.label = label
        self.duplicates = 0
        where = f"local copy {data} (schema of {bench.source.repo})" if data else (
            f"hub {bench.source.describe()}")
        notes = [label] if label else []
        if bench.role == "train":
            notes.append(f"{bench.heldout_fraction:.0%} held out as test by prompt hash")
        if not bench.size_exact and not data:
            notes.append(f"about {bench.size} rows")
        self.source = "; ".join([where, *notes])
        self.declared_sizes = None if data or keep else _declared(bench)

    @property
    def system_prompt(self) -> str | None:  # type: ignore[override]
        return self.bench.system_prompt or lookup_kind(self.kind).system_prompt

    def with_data(self, path: str) -> HubTask:
        return HubTask(self.bench, name=self.name, data=str(path), keep=self.keep,
                       label=self.label)

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        """The kind's check, then whether the rows can be had here (local copy, cache, hub)."""
        return super().preflight(grading) or availability_problem(
            self.name, self.bench.source, self.data)

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        samples = self.read_samples()
        keys = problem_keys(self.name, samples)
        if self.bench.role == "benchmark":
            split = assign_splits(keys, test_fraction=1.0)  # dedup only: all held out
        else:
            split = assign_splits(keys, test_fraction=self.bench.heldout_fraction)
        self.duplicates = split.duplicates
        return {s: tuple(samples[i] for i in split.get(s)) for s in self.splits}

    def read_samples(self) -> list[Sample]:
        """Every row kept, as a Sample (before dedup and splits); DataError naming the row."""
        rows = read_rows(self.name, self.bench.source, self.data)
        where = self.data or self.bench.source.repo
        out = []
        for n, row in enumerate(rows, start=1):
            try:
                if self.keep is not None and not self.keep(row):
                    continue
                out.append(self.bench.to_sample(row, self.name))
            except (ValueError, KeyError, TypeError) as exc:
                text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                what = f"no column {text!r}" if isinstance(exc, KeyError) else str(text)
                present = ", ".join(k for k, v in row.items() if v is not None)
                raise DataError(f"{self.name}: {where}: row {n}: {what} (columns: "
                                f"{present})") from exc
        if not out:
            raise DataError(f"{self.name}: {where}: no rows" + (
                f" in {self.label}" if self.label else ""))
        return out


def _declared(bench: Benchmark) -> dict[str, int]:
    return {"test": bench.size} if bench.role == "benchmark" else {"train": bench.size}


def problem_keys(name: str, samples: Sequence[Sample]) -> list[str]:
    """Each sample's prompt key (of its problem text), the identity splits deduplicate by;
    DataError when one sample id names two different problems."""
    seen: dict[str, str] = {}
    keys = [prompt_key(s.meta.get("problem") or s.prompt) for s in samples]
    for s, key in zip(samples, keys, strict=True):
        if seen.setdefault(s.id, key) != key:
            raise DataError(f"{name}: sample id {s.id!r} is used by two different problems")
    return keys
