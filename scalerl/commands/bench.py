"""`scalerl bench NAME`: benchmarks of the hot paths, each beside a baseline in the same run.

Dispatches to `scalerl/benches/NAME.py`; a benchmark whose module is not built yet says so in one
line and exits 2. This module holds no measurement code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

HELP = "benchmarks of the hot paths (verify, sandbox, rollout, train), each beside a baseline"

BENCHES: dict[str, str] = {
    "verify": "math verifications/s through the worker pool vs serial math-verify",
    "sandbox": "sandboxed programs/s per backend vs bare python subprocesses",
    "code": "code grading problems/s (score_code in the sandbox) vs bare exit-code subprocesses",
    "rollout": "generation tokens/s with scoring overlapped vs generation alone vs bare vLLM",
    "train": "trainer tokens/s and generator/trainer idle shares per off-policy mode",
    "fit": "sigmoid fit: vectorised grid solve vs the paper's curve_fit loop (same grid)",
}


def _load(name: str):
    try:
        return importlib.import_module(f"scalerl.benches.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"scalerl.benches.{name}":
            return None
        raise


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, summary in BENCHES.items():
        module = _load(name)
        p = sub.add_parser(name, help=module.HELP if module else f"{summary} (not built yet)")
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        if module:
            module.configure(p)
        p.set_defaults(_bench_module=module)


def run(args: argparse.Namespace) -> int:
    module = args._bench_module
    if module is None:
        print(f"scalerl bench {args.bench}: not built yet ({BENCHES[args.bench]})",
              file=sys.stderr)
        return 2
    return int(module.run(args) or 0)
