"""`scalerl tasks list|show`: the registered tasks, their split sizes and sources, and samples.

`list` builds every registered task (reading its data) to report split sizes; a task that fails to
load is reported on its row and makes the exit code 1. `show` prints samples as the rollout engine
will see them (chat messages with the task's system prompt) plus the gold and worked solution.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scalerl.envs.base import SPLITS, dumps
from scalerl.envs.catalog import get_task, prefixes, task_names
from scalerl.envs.data import DataError
from scalerl.envs.registry import UnknownTaskError
from scalerl.envs.task import Task

HELP = "list registered tasks (name, kind, split sizes, source) and show their samples"
USER_ERRORS = (UnknownTaskError, DataError, ValueError, RuntimeError, OSError)
"""Errors reported in one line with exit 2 (bad names, bad specs, bad data, broken plugins)."""


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tasks_command", metavar="{list,show}", required=True)
    p = sub.add_parser("list", help="name, kind, split sizes and source of every task")
    p.add_argument("--json", action="store_true", help="one JSON object per task, one per line")
    _add_spec(p)
    p = sub.add_parser("show", help="print samples of one task")
    p.add_argument("name", help="task name, e.g. arith, arith:add2, rg:gcd")
    p.add_argument("--split", default="test", choices=SPLITS, help="split to show (test)")
    p.add_argument("-n", type=int, default=3, help="how many samples (3)")
    p.add_argument("--json", action="store_true", help="print samples as JSONL")
    _add_spec(p)


def _add_spec(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec", action="append", default=[], metavar="FILE",
        help="register the tasks of a YAML/JSON task spec, or import a .py file of "
        "@register_task classes, first (repeatable)",
    )


def register_specs(paths: list[str]) -> None:
    from scalerl.envs.spec import register_task_file

    task_names()  # load built-ins, plugins and $SCALERL_TASKS first, so clashes are reported
    for path in paths:
        register_task_file(path)


def run(args: argparse.Namespace) -> int:
    try:
        register_specs(args.spec)
        if args.tasks_command == "list":
            return list_tasks(as_json=args.json)
        return show_task(args.name, args.split, args.n, as_json=args.json)
    except USER_ERRORS as exc:
        print(f"scalerl tasks: {exc}", file=sys.stderr)
        return 2


def describe(task: Task) -> dict[str, Any]:
    """name, kind, split sizes and source of a task: a built-in benchmark's sizes are its
    dataset card's (nothing is downloaded, `declared: true`); any other task's data is read."""
    if task.declared_sizes is not None:
        return {"name": task.name, "kind": task.kind, "splits": dict(task.declared_sizes),
                "source": task.source, "declared": True}
    sizes = {split: len(task.samples(split)) for split in task.splits}
    return {"name": task.name, "kind": task.kind, "splits": sizes, "source": task.source}


def list_tasks(*, as_json: bool) -> int:
    rows, failed = [], 0
    for name in task_names():
        try:
            rows.append(describe(get_task(name)))
        except USER_ERRORS as exc:
            failed += 1
            rows.append({"name": name, "kind": "?", "splits": {}, "error": str(exc)})
    for prefix, description in prefixes().items():
        rows.append({"name": f"{prefix}:<name>", "kind": "", "splits": {}, "source": description})
    if as_json:
        for row in rows:
            print(dumps(row))
    else:
        _print_table(rows)
    return 1 if failed else 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("NAME", "KIND", "TRAIN", "VAL", "TEST", "SOURCE")
    table = [header] + [
        (
            r["name"], r["kind"],
            *(str(r["splits"].get(s, "-")) for s in ("train", "val", "test")),
            r.get("source") or f"error: {r.get('error', '')}",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        pairs = zip(row[:-1], widths, strict=True)
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(pairs)]
        print("  ".join(cells + [row[-1]]))


def show_task(name: str, split: str, n: int, *, as_json: bool) -> int:
    task = get_task(name)
    samples = task.samples(split)[: max(n, 0)]
    if as_json:
        for s in samples:
            print(dumps(s.to_dict()))
        return 0
    print(f"{task.name} ({task.kind}), split {split}: {len(task.samples(split))} samples; "
          f"showing {len(samples)}")
    for s in samples:
        print(f"\n--- {s.id}")
        for m in s.messages(task.system_prompt):
            print(f"[{m['role']}] {m['content']}")
        gold = s.answer if s.answer is not None else json.dumps(s.tests, ensure_ascii=False)
        print(f"gold: {gold}")
        if "solution" in s.meta:
            print(f"solution: {s.meta['solution']}")
    return 0
