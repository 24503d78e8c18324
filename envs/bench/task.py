"""The table of built-in benchmarks and training sets, and `HubTask`, the task each one is.

A `Benchmark` says where a dataset lives on the hub (envs/bench/hub.py), how many rows its card
declares, how a row becomes a Sample (its prompt, gold answer or tests), how it is graded and
what it is for: a held-out `benchmark` (split `test` only) or a `train`ing set (split `train`,
plus a small `test` split held out by prompt hash, as envs/data.py splits task files).
`register_benchmark` adds one to `BENCHMARKS` and registers its task name; `HubTask` reads the
rows (hub at the pinned revision or another, `with_revision`; or a local copy, `with_data`),
maps them, skips and counts rows without a usable gold or tests (envs/rows.py), merges rows whose
problem and gold both match (two golds of one text are two problems, split together) and checks
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
from scalerl.envs.data import DataError, assign_splits, check_fractions, identity_key, prompt_key
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.kinds import lookup_kind
from scalerl.envs.registry import add_task
from scalerl.envs.rows import (
    MAX_BAD_FRACTION,
    Skipped,
    check_fraction,
    convert_rows,
    distinct_ids,
    gold_of,
    report_skipped,
)
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
    max_bad_fraction: float = MAX_BAD_FRACTION
    """Share of rows that may lack a usable gold or tests (skipped and counted) before the
    load stops (envs/rows.py)."""

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
        check_fraction(self.max_bad_fraction)

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
                 label: str = "", revision: str | None = None) -> None:
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
        self.hub = bench.source.at(revision) if revision else bench.source
        """The hub copy read: the table's, at its pinned revision unless `revision` overrides."""
        self.revision = None if data else self.hub.revision
        """The hub commit the rows come from (None for a local copy)."""
        self.duplicates = 0
        """Rows merged into an earlier row with the same problem and gold, once loaded."""
        self.skipped: Skipped | None = None
        """The rows left out as unusable, once loaded (envs/rows.py)."""
        where = f"local copy {data} (schema of {bench.source.repo})" if data else (
            f"hub {self.hub.describe()}{self.hub.pinned()}")
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

    def with_revision(self, revision: str) -> HubTask:
        return HubTask(self.bench, name=self.name, keep=self.keep, label=self.label,
                       revision=revision)

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        """The kind's check, then whether the rows can be had here (local copy, cache, hub)."""
        return super().preflight(grading) or availability_problem(self.name, self.hub, self.data)

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        """Dedup on (problem, gold), split by the problem text alone (both golds of one text
        land in the same split), ids kept unique; the skipped rows reported once."""
        samples = self.read_samples()
        problems = problem_keys(self.name, samples)
        identities = [identity_key(p, gold_of(s)) for s, p in zip(samples, problems, strict=True)]
        held = 1.0 if self.bench.role == "benchmark" else self.bench.heldout_fraction
        split = assign_splits(identities, test_fraction=held, groups=problems)
        self.duplicates = split.duplicates
        kept = sorted(i for s in self.splits for i in split.get(s))
        renamed = dict(zip(kept, distinct_ids([samples[i] for i in kept],
                                              [identities[i] for i in kept],
                                              [problems[i] for i in kept]), strict=True))
        if self.skipped is not None:
            report_skipped(self.name, self.data or self.hub.repo, self.skipped)
        return {s: tuple(renamed[i] for i in split.get(s)) for s in self.splits}

    def read_samples(self) -> list[Sample]:
        """Every row kept, as a Sample (before dedup and splits); a row without a usable gold or
        tests is skipped and counted (`skipped`), DataError when too many are."""
        rows = read_rows(self.name, self.hub, self.data)
        where = self.data or self.hub.repo
        out, self.skipped = convert_rows(rows, self._sample, where=f"{self.name}: {where}",
                                         max_bad_fraction=self.bench.max_bad_fraction)
        if not out:
            raise DataError(f"{self.name}: {where}: no rows" + (
                f" in {self.label}" if self.label else ""))
        return out

    def _sample(self, row: Mapping[str, Any]) -> Sample | None:
        if self.keep is not None and not self.keep(row):
            return None
        return self.bench.to_sample(row, self.name)


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
