"""Rows of a task's data that cannot become samples: skipped, counted by reason, reported once.

Real datasets carry a few broken rows (DeepScaleR has rows with an empty answer). One bad row
must not stop a 40k-row training set, and a wrong file must not load as a handful of samples:
`convert_rows` turns rows into samples with the task's own converter, skips a row whose
converter raises (no usable gold or tests, a missing column), counts the skips by reason
(`Skipped`), and stops with one line naming the first bad row only when more than
`max_bad_fraction` of the rows are bad (`MAX_BAD_FRACTION`, 1%, by default). `report_skipped`
logs the one-line summary; a task calls it once per load (its splits are built once).
`distinct_ids` keeps ids unique when one problem text comes with two golds (two problems, both
kept by the dedup of envs/data.py). The hub tasks (envs/bench/task.py) and the file tasks
(envs/filetask.py) share these rules. Nothing here knows a column or a kind.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from scalerl.envs.base import Sample
from scalerl.envs.data import DataError

MAX_BAD_FRACTION = 0.01
"""Default share of a data source's rows that may be skipped as unusable before the load stops
(a task spec's `max_bad_fraction`, a built-in's `Benchmark.max_bad_fraction`)."""
ROW_ERRORS = (ValueError, KeyError, TypeError)
"""What a row converter raises for a row it cannot use (a KeyError names the missing column)."""
SHOWN_REASONS = 3
"""Reasons named in the one-line summary; the rest are counted together."""

_log = logging.getLogger("scalerl.data")
T = TypeVar("T")


@dataclass(frozen=True)
class Skipped:
    """The rows of one task load left out because they could not become samples."""

    rows: int = 0
    """Rows read (kept and skipped; rows a filter such as a date window left out not counted)."""
    reasons: tuple[tuple[str, int], ...] = ()
    """(reason, rows skipped for it), most frequent first."""

    def __post_init__(self) -> None:
        if self.rows < 0 or any(n < 1 for _, n in self.reasons):
            raise ValueError(f"Skipped: counts must be positive, got {self.rows} rows and "
                             f"{self.reasons}")
        if self.count > self.rows:
            raise ValueError(f"Skipped: {self.count} rows skipped of only {self.rows} read")

    @property
    def count(self) -> int:
        """Rows skipped, every reason together."""
        return sum(n for _, n in self.reasons)

    def by_reason(self) -> dict[str, int]:
        return dict(self.reasons)

    def line(self) -> str:
        """`6 rows skipped (6 no answer: `answer` empty, no `solution`)`; empty if none was."""
        if not self.reasons:
            return ""
        shown = [f"{n} {reason}" for reason, n in self.reasons[:SHOWN_REASONS]]
        rest = sum(n for _, n in self.reasons[SHOWN_REASONS:])
        if rest:
            others = len(self.reasons) - SHOWN_REASONS
            shown.append(f"{rest} for {others} other reason{'s' if others > 1 else ''}")
        noun = "row" if self.count == 1 else "rows"
        return f"{self.count} {noun} skipped ({'; '.join(shown)})"

    def __add__(self, other: Skipped) -> Skipped:
        counts = Counter(self.by_reason()) + Counter(other.by_reason())
        return Skipped(self.rows + other.rows, _ordered(counts))


def _ordered(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def reason_of(exc: BaseException) -> str:
    """What is wrong with a row, in a few words (a KeyError is a missing column)."""
    if isinstance(exc, KeyError):
        return f"no column {exc.args[0]!r}" if exc.args else "a missing column"
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def check_fraction(value: float, what: str = "max_bad_fraction") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{what} must be a number in [0, 1] (e.g. 0.01 for 1%), got {value!r}")
    return float(value)


def convert_rows(rows: Iterable[Mapping[str, Any]],
                 convert: Callable[[Mapping[str, Any]], T | None], *, where: str,
                 max_bad_fraction: float = MAX_BAD_FRACTION) -> tuple[list[T], Skipped]:
    """`convert(row)` for every row, in order: None leaves the row out as filtered (not bad); a
    ROW_ERRORS exception skips it as bad, counted by reason. DataError (one line: `where`, the
    share, the first bad row, its reason and columns) when bad rows exceed `max_bad_fraction`
    of the rows read."""
    check_fraction(max_bad_fraction)
    out: list[T] = []
    counts: Counter[str] = Counter()
    first: tuple[int, str, str] | None = None
    read = 0
    for n, row in enumerate(rows, start=1):
        try:
            value = convert(row)
        except ROW_ERRORS as exc:
            read += 1
            reason = reason_of(exc)
            counts[reason] += 1
            if first is None:
                present = ", ".join(k for k, v in row.items() if v is not None)
                first = (n, reason, present)
            continue
        if value is not None:
            read += 1
            out.append(value)
    bad = sum(counts.values())
    if first is not None and bad > max_bad_fraction * read:
        n, reason, present = first
        share = f"{bad} of {read} rows unusable" if read > 1 else "its only row is unusable"
        raise DataError(f"{where}: {share}, more than max_bad_fraction {max_bad_fraction:g}; "
                        f"row {n}: {reason} (columns: {present})")
    return out, Skipped(read, _ordered(counts))


def report_skipped(task: str, where: str, skipped: Skipped) -> None:
    """The one-line summary of a task load's skipped rows (a warning on the `scalerl.data`
    logger, which Python prints on stderr when nothing else is configured); nothing when no row
    was skipped. Call it once per load."""
    if skipped.count:
        _log.warning("%s: %s: %s of %d read", task, where, skipped.line(), skipped.rows)


def gold_of(sample: Sample) -> Any:
    """What a sample is graded against: its answer, else its tests."""
    return sample.answer if sample.answer is not None else sample.tests


def distinct_ids(samples: Sequence[Sample], identities: Sequence[str],
                 groups: Sequence[str]) -> list[Sample]:
    """`samples` (deduplicated) with unique ids: rows of one problem text with different golds
    that share an id (one derived from the text, or the row's own) each get `-<8 hex of their
    identity>` appended, so the ids do not depend on row order. Ids shared by different texts
    are left as they are, for the task's own check to refuse."""
    texts: dict[str, set[str]] = {}
    for s, group in zip(samples, groups, strict=True):
        texts.setdefault(s.id, set()).add(group)
    counts = Counter(s.id for s in samples)
    clash = {sid for sid, n in counts.items() if n > 1 and len(texts[sid]) == 1}
    return [replace(s, id=f"{s.id}-{ident[:8]}") if s.id in clash else s
            for s, ident in zip(samples, identities, strict=True)]
