"""`scalerl bench NAME`: benchmarks of the hot paths, each beside a baseline in the same run.

Dispatches to `scalerl/benches/NAME.py` (each exposes HELP, `configure(parser)` and `run(args)`;
its heavy imports happen inside `run`). This module holds no measurement code.
"""

from __future__ import annotations

import argparse
import importlib

HELP = "benchmarks of the hot paths (verify, sandbox, rollout, train, ...), each beside a baseline"

BENCHES: tuple[str, ...] = ("verify", "sandbox", "code", "tools", "rollout", "train", "trainer",
                           "fit", "weights", "startup", "pipeline", "control", "grading")
"""Benchmark names: modules of scalerl/benches/."""


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name in BENCHES:
        module = importlib.import_module(f"scalerl.benches.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        module.configure(p)
        p.set_defaults(_bench_run=module.run)


def run(args: argparse.Namespace) -> int:
    return int(args._bench_run(args) or 0)
