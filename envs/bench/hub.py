"""Where a built-in benchmark's rows come from: its hub copy, or a local copy in the hub's schema.

`HubSource` names a hub dataset the way the field loads it (id, config, split; or, for a dataset
whose loading script `datasets` 4+ no longer runs, its data files). `read_rows` returns plain
row dicts from a local copy (`--data NAME=PATH`: a jsonl/json/parquet file or a `save_to_disk`
directory) when one is given, else from the hub through `datasets` / `huggingface_hub`, which
honour `HF_HUB_OFFLINE` and the Hugging Face cache. `availability_problem` is the cheap check the
preflight runs (offline, and the dataset in no cache): one line naming the hub id and the
`--data` fix. Nothing here maps rows into samples or knows a benchmark's columns.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.envs.data import FORMATS, DataError, load_rows

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubSource:
    """A hub dataset as the field loads it: the id, and which configs/splits or files."""

    repo: str
    """Hub dataset id, `owner/name`."""
    parts: tuple[tuple[str | None, str], ...] = ((None, "test"),)
    """(config, split) pairs read with `datasets.load_dataset` and concatenated in order."""
    files: tuple[str, ...] = ()
    """Data files of the repo read as JSON lines instead of `parts` (a dataset that shipped a
    loading script, which `datasets` 4+ no longer runs: LiveCodeBench)."""

    def __post_init__(self) -> None:
        if not _HUB_ID.match(self.repo):
            raise ValueError(f"HubSource.repo must be a hub id owner/name, got {self.repo!r}")
        if not self.parts and not self.files:
            raise ValueError(f"HubSource {self.repo}: give parts (config, split) or files")

    def describe(self) -> str:
        """`openai/gsm8k (main, test)`, `livecodebench/code_generation_lite (test.jsonl, ...)`."""
        if self.files:
            return f"{self.repo} ({', '.join(self.files)})"
        parts = "; ".join(f"{c}, {s}" if c else s for c, s in self.parts)
        return f"{self.repo} ({parts})"


def offline() -> bool:
    """Whether the hub may not be asked (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE), read now."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _hf_home() -> Path:
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface"


def cache_dirs(repo: str) -> tuple[Path, Path]:
    """Where a hub dataset would be cached: the hub's file cache (`datasets--owner--name`) and
    `datasets`' prepared cache (`owner___name`), from the environment as it is now."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or _hf_home() / "hub")
    prepared = Path(os.environ.get("HF_DATASETS_CACHE") or _hf_home() / "datasets")
    owner, name = repo.split("/", 1)
    return hub / f"datasets--{owner}--{name}", prepared / f"{owner}___{name}"


def is_cached(source: HubSource) -> bool:
    """Whether some copy of the dataset is in a Hugging Face cache (its snapshot files, or the
    prepared arrow files `datasets` writes). A partial copy still counts: loading says so."""
    files, prepared = cache_dirs(source.repo)
    snapshots = files / "snapshots"
    return (snapshots.is_dir() and any(snapshots.iterdir())) or (
        prepared.is_dir() and any(prepared.iterdir()))


def data_hint(name: str) -> str:
    """The `--data` fix for task `name` (a family's name for `family:<rest>`)."""
    return (f"give a local copy with --data {name.split(':', 1)[0]}=PATH (a jsonl/json/parquet "
            "file or a save_to_disk directory in the hub's schema)")


def availability_problem(name: str, source: HubSource, local: str | None) -> str | None:
    """None when the rows can be had here, else one line: the local copy is missing, or the
    hub may not be asked and no cache holds the dataset. Cheap: reads no rows."""
    if local is not None:
        path = Path(local)
        if path.is_dir() or (path.is_file() and path.suffix.lower() in FORMATS):
            return None
        what = "no such file or directory" if not path.exists() else (
            f"unknown format {path.suffix!r}; use {', '.join(FORMATS)} or a save_to_disk dir")
        return f"local copy {local}: {what}"
    if offline() and not is_cached(source):
        return (f"hub dataset {source.repo} is not in the Hugging Face cache and HF_HUB_OFFLINE "
                f"is set; {data_hint(name)}")
    return None


def read_rows(name: str, source: HubSource, local: str | None) -> list[dict[str, Any]]:
    """Rows of the local copy when given, else of the hub dataset; DataError (one line) naming
    the copy or the hub id, and the `--data` fix."""
    if local is not None:
        return read_local(local)
    try:
        return read_files(source) if source.files else read_parts(source)
    except DataError:
        raise
    except Exception as exc:  # offline misses, network errors, renamed repos: one line
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
        raise DataError(f"{name}: cannot load hub dataset {source.describe()} ({reason}); "
                        f"{data_hint(name)}") from exc


def read_parts(source: HubSource) -> list[dict[str, Any]]:
    import datasets

    datasets.disable_progress_bars()
    rows: list[dict[str, Any]] = []
    for config, split in source.parts:
        rows += datasets.load_dataset(source.repo, config, split=split).to_list()
    return rows


def read_files(source: HubSource) -> list[dict[str, Any]]:
    import datasets
    from huggingface_hub import hf_hub_download

    datasets.disable_progress_bars()
    paths = [hf_hub_download(source.repo, f, repo_type="dataset") for f in source.files]
    return datasets.load_dataset("json", data_files=paths, split="train").to_list()


def read_local(path: str | Path) -> list[dict[str, Any]]:
    """A jsonl/json/parquet file (envs/data.py), or a `save_to_disk` directory (a Dataset, or a
    DatasetDict whose splits are concatenated in order)."""
    path = Path(path)
    if not path.is_dir():
        return load_rows(path)
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # not a save_to_disk directory
        raise DataError(f"{path}: not a save_to_disk directory ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]})") from exc
    if isinstance(loaded, datasets.DatasetDict):
        return [row for split in loaded.values() for row in split.to_list()]
    return loaded.to_list()
