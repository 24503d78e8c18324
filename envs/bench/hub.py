"""Where a built-in benchmark's rows come from: its hub copy, or a local copy in the hub's schema.

`HubSource` names a hub dataset the way the field loads it (id, config, split; or, for a dataset
whose loading script `datasets` 4+ no longer runs, its data files) and the commit it is read at
(`revision`: pinned in the benchmark table, `--revision NAME=REV` overrides it). `read_rows`
returns plain row dicts from a local copy (`--data NAME=PATH`: a jsonl/json/parquet file or a
`save_to_disk` directory) when one is given, else from the hub at that revision through
`datasets` / `huggingface_hub`. Offline (`HF_HUB_OFFLINE`), the rows come from the Hugging Face
hub cache's snapshot of that very commit (`datasets--owner--name/snapshots/<commit>`), read by
`datasets` as a local copy of the repo: `datasets`' own offline fallback, its prepared arrow
cache, ignores the revision and is not used. `availability_problem` is the cheap check the
preflight runs (offline, and that commit in no cache): one line naming the hub id, the revision
and the fixes. Nothing here maps rows into samples or knows a benchmark's columns.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scalerl.envs.data import FORMATS, DataError, load_rows

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TRUE = {"1", "on", "yes", "true"}
_REVISION = re.compile(r"^[\w.][\w./-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


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
    revision: str | None = None
    """The repo commit the rows are read at (a 40-hex sha in the table; a branch or tag when
    overridden); None: the hub's default branch, unpinned."""

    def __post_init__(self) -> None:
        if not _HUB_ID.match(self.repo):
            raise ValueError(f"HubSource.repo must be a hub id owner/name, got {self.repo!r}")
        if not self.parts and not self.files:
            raise ValueError(f"HubSource {self.repo}: give parts (config, split) or files")
        if self.revision is not None and not _REVISION.match(self.revision):
            raise ValueError(f"HubSource {self.repo}: revision must be a commit sha, branch or "
                             f"tag, got {self.revision!r}")

    def at(self, revision: str) -> HubSource:
        """The same dataset read at `revision` (a `--revision NAME=REV` override)."""
        return replace(self, revision=revision)

    def pinned(self) -> str:
        """` at <revision>` for messages, or ` (unpinned)`."""
        return f" at {self.revision}" if self.revision else " (unpinned)"

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


def snapshot_dir(source: HubSource) -> Path | None:
    """The hub cache's snapshot of `source` at its revision (`snapshots/<commit>`; a branch or
    tag through `refs/<name>`; unpinned: `refs/main`), or None when the cache has none."""
    snapshots = cache_dirs(source.repo)[0] / "snapshots"
    commit = source.revision if source.revision and _COMMIT.match(source.revision) else None
    if commit is None:
        ref = cache_dirs(source.repo)[0] / "refs" / (source.revision or "main")
        commit = ref.read_text().strip() if ref.is_file() else None
    path = snapshots / commit if commit else None
    return path if path is not None and path.is_dir() else None


def cached_revisions(repo: str) -> list[str]:
    """The commits of `repo` the hub cache holds a snapshot of."""
    snapshots = cache_dirs(repo)[0] / "snapshots"
    return sorted(p.name for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []


def is_cached(source: HubSource) -> bool:
    """Whether the hub cache holds a snapshot of the dataset at its revision (a partial copy
    still counts: loading says what is missing)."""
    return snapshot_dir(source) is not None


def family(name: str) -> str:
    return name.split(":", 1)[0]


def data_hint(name: str) -> str:
    """The `--data` fix for task `name` (a family's name for `family:<rest>`)."""
    return (f"give a local copy with --data {family(name)}=PATH (a jsonl/json/parquet "
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
        others = cached_revisions(source.repo)
        held = f" (it holds {', '.join(others)}; --revision {family(name)}=REV reads one)" if (
            others) else ""
        return (f"hub dataset {source.repo}{source.pinned()} is not in the Hugging Face cache"
                f"{held} and HF_HUB_OFFLINE is set; {data_hint(name)}")
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
        raise DataError(f"{name}: cannot load hub dataset {source.describe()}{source.pinned()} "
                        f"({reason}); "
                        f"{data_hint(name)}") from exc


def read_parts(source: HubSource) -> list[dict[str, Any]]:
    """Each (config, split) of the repo at its revision, through `datasets.load_dataset`: from
    the hub, or offline from the hub cache's snapshot of that commit (read as a local copy of
    the repo, so its README's configs apply as they do on the hub)."""
    import datasets

    datasets.disable_progress_bars()
    where, pin = source.repo, {"revision": source.revision}
    if offline():
        snapshot = snapshot_dir(source)
        if snapshot is None:
            raise DataError(f"hub dataset {source.repo}{source.pinned()} is not in the Hugging "
                            "Face cache and HF_HUB_OFFLINE is set")
        where, pin = str(snapshot), {}
    prepared = str(cache_dirs(source.repo)[1].parent)  # datasets' cache as the env says now
    rows: list[dict[str, Any]] = []
    for config, split in source.parts:
        rows += datasets.load_dataset(where, config, split=split, cache_dir=prepared,
                                      **pin).to_list()
    return rows


def read_files(source: HubSource) -> list[dict[str, Any]]:
    """The repo's data files at its revision (`hf_hub_download`: from the hub, or offline from
    the cache's snapshot of that commit), read as JSON lines."""
    import datasets
    from huggingface_hub import hf_hub_download

    datasets.disable_progress_bars()
    where = {"cache_dir": str(cache_dirs(source.repo)[0].parent)}  # the cache checked, now
    if offline():
        where["local_files_only"] = True
    paths = [hf_hub_download(source.repo, f, repo_type="dataset", revision=source.revision,
                             **where) for f in source.files]
    return datasets.load_dataset("json", data_files=paths, split="train",
                                 cache_dir=str(cache_dirs(source.repo)[1].parent)).to_list()


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
