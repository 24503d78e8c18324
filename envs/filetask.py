"""`FileTask`: a task made from a data file, field names and a kind (`math`, `code`, a user's).

Rows are loaded with `datasets` (envs/data.py), mapped into Samples (the gold, read by the kind's
`read_gold` from its `gold_columns`, into the kind's `gold_field`); a row without a usable prompt
or gold is skipped and counted, up to `max_bad_fraction` of a file (envs/rows.py). Rows are
deduplicated on prompt and gold together and split by a hash of the normalised prompt alone (a
prompt with two golds is two samples in one split); an explicit held-out file overrides the
hash split for `test` and its prompts are removed from train. Scoring is the kind's verifier
(the Task default); a spec's `tools`/`feedback` keys arrive as the built `environment`
(envs/spec.py makes it). Nothing here parses answers or runs code; the built-in kinds are imported
so `FileTask(name, "math", ...)` works without the catalog.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from scalerl.envs.base import Sample
from scalerl.envs.code import verifier as _code_kind  # noqa: F401 - registers the `code` kind
from scalerl.envs.data import (
    DataError,
    assign_splits,
    check_fractions,
    identity_key,
    load_rows,
    prompt_key,
)
from scalerl.envs.environment import Environment
from scalerl.envs.kinds import GoldReader, lookup_kind
from scalerl.envs.math import verifier as _math_kind  # noqa: F401 - registers the `math` kind
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

PROMPT_COLUMNS: tuple[str, ...] = ("prompt", "problem", "question")
"""Columns tried, in order, for the prompt after the one `fields` names (a data file and its
held-out file may differ: Polaris-style `answer` in one, MATH-style `solution` in the other)."""


class FileTask(Task):
    """A task backed by a data file (or hub id), split deterministically and leak-free."""

    def __init__(
        self,
        name: str,
        kind: str,
        data: str,
        *,
        test_data: str | None = None,
        fields: Mapping[str, str | None] | None = None,
        test_fraction: float = 0.1,
        val_fraction: float = 0.0,
        seed: int = 0,
        system_prompt: str | None = None,
        requires_thinking: bool = False,
        options: Mapping[str, Any] | None = None,
        max_bad_fraction: float = MAX_BAD_FRACTION,
        environment: Environment | None = None,
    ) -> None:
        check_fractions(test_fraction, val_fraction)
        self.max_bad_fraction = check_fraction(max_bad_fraction)
        self.name = name
        self.kind = kind
        self.data = str(data)
        self.test_data = str(test_data) if test_data else None
        self.fields = dict(fields or {})
        self.test_fraction = test_fraction
        self.val_fraction = val_fraction
        self.seed = seed
        self._system_prompt = system_prompt
        self.requires_thinking = requires_thinking
        self.options = dict(options or {})
        self.environment = environment
        self.splits = ("train", "val", "test") if val_fraction > 0 else ("train", "test")
        self.source = self.data + (f" (held out: {self.test_data})" if self.test_data else "")
        self.duplicates = 0
        """Rows dropped as duplicates (same prompt and gold within the data, or a held-out
        prompt), once loaded."""
        self.skipped: Skipped | None = None
        """Rows of the data (and held-out) files left out as unusable, once loaded."""

    def with_data(self, path: str) -> FileTask:
        """The same task (kind, fields, splits, options) reading `path` instead of `data`."""
        return FileTask(self.name, self.kind, str(path), test_data=self.test_data,
                        fields=self.fields, test_fraction=self.test_fraction,
                        val_fraction=self.val_fraction, seed=self.seed,
                        system_prompt=self._system_prompt, requires_thinking=self.requires_thinking,
                        options=self.options, max_bad_fraction=self.max_bad_fraction,
                        environment=self.environment)

    @property
    def system_prompt(self) -> str | None:  # type: ignore[override]
        if self._system_prompt is not None:
            return self._system_prompt
        return lookup_kind(self.kind).system_prompt

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        """Every split at once: the held-out file's prompts must be kept out of train."""
        samples, keys, skipped = self._read(self.data)
        idents = _identities(samples)
        heldout: list[Sample] = []
        if self.test_data:
            test_samples, test_keys, test_skipped = self._read(self.test_data)
            skipped += test_skipped
            test_idents = _identities(test_samples)
            split = assign_splits(test_idents, test_fraction=1.0, groups=test_keys)
            heldout = distinct_ids([test_samples[i] for i in split.test],
                                   [test_idents[i] for i in split.test],
                                   [test_keys[i] for i in split.test])
            split = assign_splits(
                idents, test_fraction=0.0, val_fraction=self.val_fraction, seed=self.seed,
                heldout_keys=test_keys, groups=keys,
            )
        else:
            split = assign_splits(
                idents, test_fraction=self.test_fraction, val_fraction=self.val_fraction,
                seed=self.seed, groups=keys,
            )
        self.duplicates, self.skipped = split.duplicates, skipped
        kept = sorted(i for s in ("train", "val", "test") for i in split.get(s))
        renamed = dict(zip(kept, distinct_ids([samples[i] for i in kept],
                                              [idents[i] for i in kept],
                                              [keys[i] for i in kept]), strict=True))
        out = {s: tuple(renamed[i] for i in split.get(s)) for s in ("train", "val", "test")}
        if self.test_data:
            out["test"] = tuple(heldout)
        _check_unique_ids(out, self.data)
        report_skipped(self.name, self.source, skipped)
        return out

    def _read(self, source: str) -> tuple[list[Sample], list[str], Skipped]:
        rows = load_rows(source)
        if not rows:
            raise DataError(f"{source}: no rows")
        columns = list(rows[0])
        prompt_col = self._prompt_column(source, columns)
        gold_col, reader = self._gold_column(source, columns)
        gold_field = lookup_kind(self.kind).gold_field
        id_col = self.fields.get("id", "id" if "id" in columns else None)
        if id_col and id_col not in columns:
            raise DataError(f"{source}: no id field {id_col!r}; fields: {', '.join(columns)}")
        numbers = itertools.count(1)  # convert_rows calls `sample` once per row, in order

        def sample(row: Mapping[str, Any]) -> tuple[Sample, str]:
            n = next(numbers)
            prompt = _prompt_value(row.get(prompt_col), prompt_col)
            gold = _gold_value(row.get(gold_col), gold_col, reader)
            key = prompt_key(prompt)
            sid = str(row[id_col]) if id_col and row.get(id_col) is not None else key[:16]
            meta = {k: v for k, v in row.items() if k not in (prompt_col, gold_col, id_col)}
            meta["row"] = n
            return Sample(id=sid, task=self.name, prompt=prompt, meta=meta,
                          **{gold_field: gold}), key

        made, skipped = convert_rows(rows, sample, where=source,
                                     max_bad_fraction=self.max_bad_fraction)
        if not made:
            raise DataError(f"{source}: no usable rows ({skipped.line()})")
        return [m[0] for m in made], [m[1] for m in made], skipped

    def _prompt_column(self, source: str, columns: list[str]) -> str:
        col = self.fields.get("prompt")
        candidates = tuple(dict.fromkeys((col, *PROMPT_COLUMNS) if col else PROMPT_COLUMNS))
        for c in candidates:
            if c in columns:
                return c
        raise DataError(
            f"{source}: no prompt field {' / '.join(candidates)}; fields in the file: "
            f"{', '.join(columns)} (set fields.prompt)"
        )

    def _gold_column(self, source: str, columns: list[str]) -> tuple[str, GoldReader | None]:
        kind = lookup_kind(self.kind)
        gold_field, reader = kind.gold_field, kind.read_gold
        default_cols = kind.gold_columns or (gold_field,)
        col = self.fields.get(gold_field) or self.fields.get("gold")
        candidates = tuple(dict.fromkeys((col, *default_cols) if col else default_cols))
        for c in candidates:
            if c in columns:
                return c, reader
        raise DataError(
            f"{source}: no {gold_field} field {' / '.join(candidates)}; fields in the file: "
            f"{', '.join(columns)} (set fields.{gold_field})"
        )


def _identities(samples: Sequence[Sample]) -> list[str]:
    """The dedup identity of each sample: its (normalised) prompt and its gold."""
    return [identity_key(s.prompt, gold_of(s)) for s in samples]


def _prompt_value(value: Any, col: str) -> str | tuple:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in value
    ):
        return tuple({"role": str(m["role"]), "content": str(m["content"])} for m in value)
    what = "missing" if value in (None, "", []) else f"not text or chat messages: {value!r:.60}"
    raise ValueError(f"field {col!r} is {what}")


def _gold_value(value: Any, col: str, reader: GoldReader | None) -> Any:
    if value is None or value == "":
        raise ValueError(f"field {col!r} is missing")
    if reader is None:
        return value
    try:
        return reader(value, col)
    except ValueError as exc:
        raise ValueError(f"field {col!r}: {exc}") from exc


def _check_unique_ids(splits: Mapping[str, Sequence[Sample]], source: str) -> None:
    seen: dict[str, str] = {}
    for split, samples in splits.items():
        for s in samples:
            if s.id in seen:
                raise DataError(
                    f"{source}: sample id {s.id!r} appears in {seen[s.id]} and {split} with "
                    "different prompts; give unique ids or set fields.id to null for hash ids"
                )
            seen[s.id] = split
