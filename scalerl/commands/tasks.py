"""`scalerl tasks list|show|overlap`: the registered tasks, their sizes and sources, samples.

`list` reports every registered task's split sizes (a built-in benchmark's from its dataset card,
without a download, unless `--data` gives a local copy; any other task by reading its data); a
task that fails to load is reported on its row and makes the exit code 1. `show` prints samples
as the rollout engine will see them (chat messages with the task's system prompt) plus the gold
and worked solution. `overlap A B` counts A's problems that B also holds (the contamination
check of `scalerl eval`). `--spec`, `--data` and `--revision` are the task flags every command
shares (scalerl/local_data.py). A loaded task also reports the rows it skipped as unusable and
the duplicates it merged.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scalerl.envs.base import SPLITS, dumps
from scalerl.envs.bench import HubTask
from scalerl.envs.catalog import prefixes, task_names
from scalerl.envs.data import DataError
from scalerl.envs.registry import UnknownTaskError
from scalerl.envs.rows import Skipped
from scalerl.envs.task import Task
from scalerl.local_data import Sources, add_task_args, sources_from_args, unused_note

HELP = "list registered tasks (name, kind, split sizes, source) and show their samples"
USER_ERRORS = (UnknownTaskError, DataError, ValueError, RuntimeError, OSError)
"""Errors reported in one line with exit 2 (bad names, bad specs, bad data, broken plugins)."""


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tasks_command", metavar="{list,show,overlap}",
                                required=True)
    p = sub.add_parser("list", help="name, kind, split sizes and source of every task")
    p.add_argument("--json", action="store_true", help="one JSON object per task, one per line")
    add_task_args(p)
    p = sub.add_parser("show", help="print samples of one task")
    p.add_argument("name", help="task name, e.g. arith, arith:add2, rg:gcd")
    p.add_argument("--split", default="test", choices=SPLITS, help="split to show (test)")
    p.add_argument("-n", type=int, default=3, help="how many samples (3)")
    p.add_argument("--json", action="store_true", help="print samples as JSONL")
    add_task_args(p)
    p = sub.add_parser("overlap", help="how many of task A's problems task B also holds "
                       "(same normalised prompt, or a shared 13-word run)")
    p.add_argument("a", help="the task whose problems are counted (e.g. a benchmark)")
    p.add_argument("b", help="the task searched (e.g. a training set)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_task_args(p)


def run(args: argparse.Namespace) -> int:
    try:
        sources = sources_from_args(args)
        if args.tasks_command == "list":
            return list_tasks(as_json=args.json, sources=sources)
        used = [args.a, args.b] if args.tasks_command == "overlap" else [args.name]
        note = unused_note("tasks", sources, used)
        if note:
            print(note, file=sys.stderr)
        if args.tasks_command == "overlap":
            return overlap_tasks(args.a, args.b, sources, as_json=args.json)
        task = sources.task(args.name)
        return show_task(task, args.split, args.n, as_json=args.json)
    except USER_ERRORS as exc:
        print(f"scalerl tasks: {exc}", file=sys.stderr)
        return 2


def describe(task: Task) -> dict[str, Any]:
    """name, kind, split sizes and source of a task: a built-in benchmark's sizes are its
    dataset card's (nothing is downloaded, `declared: true`); any other task's data is read."""
    row: dict[str, Any] = {"name": task.name, "kind": task.kind}
    if task.declared_sizes is not None:
        row.update(splits=dict(task.declared_sizes), source=task.source, declared=True)
    else:
        row.update(splits={s: len(task.samples(s)) for s in task.splits}, source=task.source)
        row.update(load_notes(task))
    if task.revision:
        row["revision"] = task.revision
    if isinstance(task, HubTask):  # a built-in benchmark: how the reports grade it
        row["grading"] = task.bench.grading
    return row


def load_notes(task: Task) -> dict[str, Any]:
    """What loading a task's data left out: rows skipped as unusable (by reason) and
    duplicates merged (same problem and gold); empty when nothing was."""
    out: dict[str, Any] = {}
    if task.skipped is not None and task.skipped.count:
        out["skipped"] = task.skipped.by_reason()
    if task.duplicates:
        out["merged"] = task.duplicates
    return out


def list_tasks(*, as_json: bool, sources: Sources | None = None) -> int:
    rows, failed = [], 0
    for name in task_names():
        try:
            rows.append(describe((sources or Sources()).task(name)))
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
            _source_cell(r),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        pairs = zip(row[:-1], widths, strict=True)
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(pairs)]
        print("  ".join(cells + [row[-1]]))


def _source_cell(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"error: {row['error']}"
    reasons = tuple(row.get("skipped", {}).items())
    notes = [Skipped(sum(n for _, n in reasons), reasons).line()] + (
        [f"{row['merged']} duplicate rows merged"] if row.get("merged") else [])
    return "; ".join(filter(None, [row.get("source", ""), *notes]))


def show_task(task: Task, split: str, n: int, *, as_json: bool) -> int:
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


def overlap_tasks(a: str, b: str, sources: Sources, *, as_json: bool) -> int:
    """How many of `a`'s problems (every split) `b` holds (every split)."""
    from scalerl.evaluation.contamination import overlap

    tasks = sources.resolve([a, b])
    every = {n: [s for split in t.splits for s in t.samples(split)] for n, t in tasks.items()}
    found = overlap(every[a], every[b])
    if as_json:
        print(dumps({"a": a, "b": b, **found.to_dict()}))
    else:
        print(f"{a} in {b}: {found.describe()}"
              + (f"; e.g. {', '.join(found.examples)}" if found.examples else ""))
    return 0
