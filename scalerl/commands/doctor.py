"""`scalerl doctor`: one screen saying what works on this machine and what to do about the rest.

Runs `scalerl.doctor`'s checks (cores and memory, GPUs, sandbox backends and cgroups, docker and
its image, torch/transformers/vLLM, the Hugging Face cache and offline mode, the tiny model, with
`--cluster ray` the grading cluster's nodes, a vLLM engine start on the tiny model unless
`--quick`) and prints one line each, with the fix under any that
is not ok. Exit 0 when nothing failed (warnings allowed), 1 when something the embedded default
needs does not work. Only glue: the checks live in scalerl/doctor.py.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

HELP = "check this machine: sandboxes, cgroups, docker, vLLM engine start, memory, GPUs, HF cache"
MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit codes: 0 nothing failed (warnings allowed); 1 something failed"
    parser.add_argument("--json", action="store_true",
                        help='one JSON object: {"ok": bool, "checks": [{name, status, detail, '
                             'fix}]}')
    parser.add_argument("--quick", action="store_true",
                        help="skip the vLLM engine start (about 30-60 s on 2 cores)")
    parser.add_argument("--log", type=Path, default=None,
                        help="where the engine start's own output goes (default: a temp file)")
    from scalerl.commands.engine_args import add_cluster_args

    add_cluster_args(parser.add_argument_group("grading cluster (reported with --cluster ray)"))


def run(args: argparse.Namespace) -> int:
    from scalerl.commands.engine_args import grading
    from scalerl.doctor import run_checks
    from scalerl.ending import close_pools

    try:
        graded = grading(args)
    except ValueError as exc:
        print(f"scalerl doctor: {exc}")
        return 2
    log = args.log or Path(tempfile.mkstemp(prefix="scalerl-doctor-", suffix=".log")[1])
    checks = run_checks(quick=args.quick, log_path=log, grading=graded)
    ok = all(c.status != "fail" for c in checks)
    close_pools()
    print_report(checks, ok, as_json=args.json)
    return 0 if ok else 1


def print_report(checks: list, ok: bool, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"ok": ok, "checks": [c.to_dict() for c in checks]}))
        return
    for c in checks:
        print(f"{MARK[c.status]}  {c.name:18s} {c.detail}")
        if c.fix:
            print(f"      {'':18s} fix: {c.fix}")
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    print(f"{len(checks)} checks: {failed} failed, {warned} warnings"
          + ("" if ok else "; `scalerl train` cannot run as it is"), flush=True)
