"""`--data NAME=PATH` and a run config's `data:`: a task reading a local copy of its data.

For air-gapped clusters and tests: every built-in benchmark and training set (and every task
spec) can read its rows from a local copy in its source's schema instead of the hub. NAME is a
task (`math500`) or a family (`livecodebench` covers every `livecodebench:<window>`). The glue
resolves names here, once per process per (name, path), and hands the commands Task objects
(`Task.with_data`); the layers below never look a task up by name. Nothing here reads rows.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from scalerl.envs.catalog import get_task
from scalerl.envs.registry import family
from scalerl.envs.task import Task


def add_data_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", action="append", default=[], metavar="NAME=PATH",
        help="read task NAME (or a family: livecodebench) from a local copy in its hub schema: "
             "a jsonl/json/parquet file or a save_to_disk directory (repeatable; for offline "
             "machines)")


def parse_data(items: Sequence[str] | None) -> dict[str, str]:
    """{name: absolute path} of `--data NAME=PATH` flags; ValueError (one line) otherwise."""
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"--data {item!r}: expected NAME=PATH, e.g. --data "
                             "math500=math500.jsonl")
        if name in out and out[name] != path:
            raise ValueError(f"--data {name}: given twice ({out[name]} and {path})")
        out[name] = str(Path(path).expanduser().resolve())
    return out


def data_for(name: str, data: Mapping[str, str]) -> str | None:
    """The local copy task `name` reads: its own entry, else its family's (`livecodebench` for
    `livecodebench:2024-08..2025-02`), else None."""
    if name in data:
        return data[name]
    return data.get(family(name)) if family(name) != name else None


def task_with_data(name: str, path: str | None) -> Task:
    """Task `name` from the catalog, reading `path` when given: one object per process per
    (task, path), so its samples are read once; a task registered anew gets a new copy."""
    task = get_task(name)
    return task if path is None else _copy(task, path)


@functools.cache
def _copy(task: Task, path: str) -> Task:
    """`task` reading `path` (keyed by the task object itself: Task compares by identity)."""
    return task.with_data(path)


def resolve_tasks(names: Iterable[str], data: Mapping[str, str],
                  *, also: Iterable[str] = ()) -> dict[str, Task]:
    """The Task objects of `names`, each with its local copy; ValueError naming a `--data` NAME
    that none of `names` (nor `also`, names used elsewhere, e.g. training tasks) is or belongs
    to."""
    names = list(dict.fromkeys(names))
    known = set(names) | set(also)
    unused = [k for k in data if not any(k in (n, family(n)) for n in known)]
    if unused:
        raise ValueError(f"--data {unused[0]}: no task {unused[0]!r} among "
                         f"{', '.join(sorted(known))} (NAME is one of the tasks, or a family "
                         "such as livecodebench)")
    return {n: task_with_data(n, data_for(n, data)) for n in names}
