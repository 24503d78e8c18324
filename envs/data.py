"""Loading task data with `datasets` and splitting it into leak-free held-out splits.

`load_rows` reads local jsonl/json/parquet/csv files (or a Hugging Face hub id) into plain dicts;
`assign_splits` deduplicates rows by their identity and puts each in exactly one split by a
sha256 of its problem's normalised text, so the split is the same on every call, process and
machine, and no problem text reaches both train and test. The identity is the prompt alone
(`prompt_key`) or, for data with golds, the prompt and its gold together (`identity_key`: two
rows with one text and different answers or tests are two problems, kept both and put in the
same split). Nothing here knows about task kinds or verifiers.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS: dict[str, str] = {
    ".jsonl": "json",
    ".json": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".csv": "csv",
}
"""File suffix -> `datasets` builder name."""

_SPACE = re.compile(r"\s+")


class DataError(ValueError):
    """Bad task data: a missing file, a malformed row, a missing field. One-line message."""


def normalize_prompt(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """NFKC, lowercase, whitespace collapsed; chat messages are joined as `role: content` lines."""
    if not isinstance(prompt, str):
        prompt = "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in prompt)
    text = unicodedata.normalize("NFKC", prompt).lower()
    return _SPACE.sub(" ", text).strip()


def prompt_key(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """sha256 hex digest of the normalised prompt: the identity used for dedup and splits."""
    return hashlib.sha256(normalize_prompt(prompt).encode("utf-8")).hexdigest()


def canonical_gold(gold: Any) -> str:
    """A gold as text for identity: an answer with its whitespace collapsed, tests (or any
    other value) as JSON with sorted keys."""
    if isinstance(gold, str):
        return " ".join(gold.split())
    return json.dumps(gold, sort_keys=True, ensure_ascii=False, default=str)


def identity_key(prompt: str | Sequence[Mapping[str, Any]], gold: Any) -> str:
    """sha256 hex digest of the normalised prompt and its gold: what dedup merges on (a row is
    a duplicate only when both match an earlier row's)."""
    text = normalize_prompt(prompt) + "\x00" + canonical_gold(gold)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(key: str, *, test_fraction: float, val_fraction: float = 0.0, seed: int = 0) -> str:
    """`train`, `val` or `test` for a prompt key, from a sha256 of seed and key (no `hash()`)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64  # uniform in [0, 1)
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "val"
    return "train"


@dataclass(frozen=True)
class Split:
    """Indices into the loaded rows for each split, after dedup; and what was dropped."""

    train: tuple[int, ...]
    val: tuple[int, ...]
    test: tuple[int, ...]
    duplicates: int
    """Rows dropped: the same identity as an earlier row, or a problem held out elsewhere."""
    dropped: tuple[int, ...] = ()
    """Their indices, in order."""

    def get(self, split: str) -> tuple[int, ...]:
        return getattr(self, split)


def assign_splits(
    keys: Sequence[str],
    *,
    test_fraction: float,
    val_fraction: float = 0.0,
    seed: int = 0,
    heldout_keys: Iterable[str] = (),
    groups: Sequence[str] | None = None,
) -> Split:
    """Deduplicate `keys` (first occurrence wins) and assign each to a split by `split_of` of
    its group (`groups[i]`, the prompt key of row i; None: the key itself).

    A row's split never depends on the other rows, and rows of one group (one problem text
    with different golds) always share a split. Rows whose group is in `heldout_keys` (the
    prompts of an explicit held-out file) are dropped, so nothing held out elsewhere can reach
    train or val.
    """
    check_fractions(test_fraction, val_fraction)
    groups = keys if groups is None else groups
    if len(groups) != len(keys):
        raise ValueError(f"assign_splits: {len(keys)} keys but {len(groups)} groups")
    banned = set(heldout_keys)
    seen: set[str] = set()
    out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    dropped: list[int] = []
    for i, (key, group) in enumerate(zip(keys, groups, strict=True)):
        if key in seen or group in banned:
            dropped.append(i)
            continue
        seen.add(key)
        split = split_of(group, test_fraction=test_fraction, val_fraction=val_fraction, seed=seed)
        out[split].append(i)
    return Split(
        train=tuple(out["train"]),
        val=tuple(out["val"]),
        test=tuple(out["test"]),
        duplicates=len(dropped),
        dropped=tuple(dropped),
    )


def check_fractions(test_fraction: float, val_fraction: float) -> None:
    if not (0.0 <= test_fraction <= 1.0 and 0.0 <= val_fraction <= 1.0):
        raise ValueError(
            f"test_fraction={test_fraction} and val_fraction={val_fraction} must be in [0, 1]"
        )
    if test_fraction + val_fraction > 1.0:
        raise ValueError(
            f"test_fraction + val_fraction = {test_fraction + val_fraction} must be <= 1"
        )


def is_hub_id(source: str) -> bool:
    """A hub id looks like `owner/name` (optionally `owner/name@split`) with no file suffix."""
    if Path(source).suffix.lower() in FORMATS or Path(source).exists():
        return False
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+(@[\w.\[\]:%+-]+)?", source))


def load_rows(source: str | Path) -> list[dict[str, Any]]:
    """Rows of a local data file (jsonl/json/parquet/csv) or a hub id `owner/name[@split]`."""
    import datasets  # slow import; only when data is read

    datasets.disable_progress_bars()
    source = str(source)
    if is_hub_id(source):
        return _load_hub(source)
    path = Path(source)
    builder = FORMATS.get(path.suffix.lower())
    if builder is None:
        raise DataError(
            f"{source}: unknown data format {path.suffix!r}; use one of {', '.join(FORMATS)}"
        )
    if not path.is_file():
        raise DataError(f"{source}: no such file")
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as exc:  # datasets wraps parse errors; find the bad line ourselves
        raise DataError(_diagnose(path, builder, exc)) from exc
    return ds.to_list()


def _load_hub(source: str) -> list[dict[str, Any]]:
    import datasets

    name, _, split = source.partition("@")
    try:
        ds = datasets.load_dataset(name, split=split or "train")
    except Exception as exc:
        raise DataError(f"{source}: cannot load from the hub ({_one_line(exc)})") from exc
    return ds.to_list()


def _diagnose(path: Path, builder: str, exc: Exception) -> str:
    """One line saying where a file failed to parse (line number for JSON lines files)."""
    if builder == "json":
        text = path.read_text(encoding="utf-8", errors="replace")
        if not text.lstrip().startswith("["):
            for n, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    return f"{path}: line {n}: invalid JSON ({err.msg})"
                if not isinstance(row, dict):
                    return f"{path}: line {n}: expected a JSON object, got {type(row).__name__}"
    return f"{path}: cannot load as {builder} ({_one_line(exc)})"


def _one_line(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    text = f"{type(cause).__name__}: {cause}"
    return " ".join(text.split())[:300]
