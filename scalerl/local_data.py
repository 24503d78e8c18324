"""The task flags every command that takes tasks shares: `--spec`, `--data`, `--revision`.

`--spec FILE` registers a task spec's (or a `.py` file's) tasks first. `--data NAME=PATH` makes a
task read a local copy of its data in its source's schema instead of the hub (air-gapped
clusters, tests); `--revision NAME=REV` reads a built-in hub dataset at another commit than the
one its table pins. NAME is a task (`math500`) or a family (`livecodebench` covers every
`livecodebench:<window>`). A NAME that is no task at all is refused with the list of tasks; a
real task that this command does not use is accepted (one note line says it is ignored), so an
offline cluster's standard set of flags works with every command. A run config's `data:` and
`revision:` are the same per task. The glue resolves names here, once per process per (name,
copy, revision), and hands the commands Task objects (`Task.with_data`, `Task.with_revision`);
the layers below never look a task up by name. Nothing here reads rows.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from scalerl.envs.catalog import get_task, prefixes, task_names
from scalerl.envs.registry import family
from scalerl.envs.task import Task


def add_task_args(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--spec`, `--data` and `--revision`, the same on every command that takes tasks."""
    parser.add_argument(
        "--spec", action="append", default=[], metavar="FILE",
        help="register the tasks of a YAML/JSON task spec, or import a .py file of "
             "@register_task classes, first (repeatable)")
    parser.add_argument(
        "--data", action="append", default=[], metavar="NAME=PATH",
        help="read task NAME (or a family: livecodebench) from a local copy in its hub schema: "
             "a jsonl/json/parquet file or a save_to_disk directory (repeatable; for offline "
             "machines; a task this command does not use is ignored)")
    parser.add_argument(
        "--revision", action="append", default=[], metavar="NAME=REV",
        help="read built-in hub dataset NAME (or a family) at commit, branch or tag REV instead "
             "of the pinned revision (repeatable; docs/benchmarks.md lists the pins)")


def _pairs(items: Sequence[str] | None, flag: str, meta: str, example: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"{flag} {item!r}: expected {meta}, e.g. {flag} {example}")
        if name in out and out[name] != value:
            raise ValueError(f"{flag} {name}: given twice ({out[name]} and {value})")
        out[name] = value
    return out


def parse_data(items: Sequence[str] | None) -> dict[str, str]:
    """{name: absolute path} of `--data NAME=PATH` flags; ValueError (one line) otherwise."""
    pairs = _pairs(items, "--data", "NAME=PATH", "math500=math500.jsonl")
    return {k: str(Path(v).expanduser().resolve()) for k, v in pairs.items()}


def parse_revisions(items: Sequence[str] | None) -> dict[str, str]:
    """{name: revision} of `--revision NAME=REV` flags; ValueError (one line) otherwise."""
    return _pairs(items, "--revision", "NAME=REV", "math500=main")


def check_names(names: Iterable[str], flag: str) -> None:
    """ValueError (one line, with the list) for a NAME that is no task, no family and no
    member of a family (`livecodebench:2024-08..2025-02`)."""
    tasks, families = set(task_names()), set(prefixes())
    for name in names:
        if name not in tasks and family(name) not in families:
            known = sorted(tasks) + [f"{p}:<name>" for p in sorted(families)]
            raise ValueError(f"{flag} {name}: no task {name!r}; known tasks: {', '.join(known)}")


def data_for(name: str, data: Mapping[str, str]) -> str | None:
    """The entry task `name` gets from `data` (a copy or a revision, by name): its own, else
    its family's (`livecodebench` for `livecodebench:2024-08..2025-02`), else None."""
    if name in data:
        return data[name]
    return data.get(family(name)) if family(name) != name else None


def task_with_data(name: str, path: str | None, revision: str | None = None) -> Task:
    """Task `name` from the catalog, reading `path` or the hub at `revision` when given: one
    object per process per (task, path, revision), so its samples are read once; a task
    registered anew gets a new copy."""
    if path is not None and revision is not None:
        raise ValueError(f"task {name!r}: --data and --revision both given; a local copy has no "
                         "hub revision, give one of them")
    task = get_task(name)
    return task if path is None and revision is None else _copy(task, path, revision)


@functools.cache
def _copy(task: Task, path: str | None, revision: str | None) -> Task:
    """`task` reading `path`, or at `revision` (keyed by the task object itself: Task compares
    by identity)."""
    return task.with_data(path) if path is not None else task.with_revision(revision)


@dataclass(frozen=True)
class Sources:
    """What `--data` and `--revision` (or a run config) give, by task or family name."""

    data: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Local copies: name -> absolute path."""
    revisions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Hub revisions: name -> commit, branch or tag."""

    def __post_init__(self) -> None:
        both = sorted(set(self.data) & set(self.revisions))
        if both:
            raise ValueError(f"--data {both[0]} and --revision {both[0]}: a local copy has no hub "
                             "revision; give one of them")

    def task(self, name: str) -> Task:
        """Task `name` with its local copy or revision."""
        return task_with_data(name, data_for(name, self.data), data_for(name, self.revisions))

    def resolve(self, names: Iterable[str]) -> dict[str, Task]:
        """The Task objects of `names` (in order, once each)."""
        return {n: self.task(n) for n in dict.fromkeys(names)}

    def unused(self, used: Iterable[str]) -> list[str]:
        """The NAMEs given that none of `used` is or belongs to."""
        used = set(used) | {family(n) for n in used}
        return sorted({k for k in (*self.data, *self.revisions) if k not in used})


def sources_from_args(args: argparse.Namespace) -> Sources:
    """Register `--spec` files, then parse `--data`/`--revision` and refuse a NAME that is no
    task (ValueError, one line)."""
    register_specs(getattr(args, "spec", None) or [])
    sources = Sources(parse_data(getattr(args, "data", None)),
                      parse_revisions(getattr(args, "revision", None)))
    check_names(sources.data, "--data")
    check_names(sources.revisions, "--revision")
    return sources


def register_specs(paths: Sequence[str]) -> None:
    """Register each task spec or `.py` task file, after the built-ins, plugins and
    `$SCALERL_TASKS` (so a clash is reported)."""
    from scalerl.envs.spec import register_task_file

    task_names()
    for path in paths:
        register_task_file(path)


def unused_note(command: str, sources: Sources, used: Iterable[str]) -> str | None:
    """One line naming the `--data`/`--revision` NAMEs this command does not use, or None."""
    names = sources.unused(used)
    if not names:
        return None
    return (f"scalerl {command}: note: --data/--revision for {', '.join(names)}: not used by "
            "this command (ignored)")
