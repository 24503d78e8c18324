"""`scalerl tiny [--model NAME] [--out DIR] [--json] [--force]`: build (or find) a tiny CPU model.

Prints the model directory; with `--json`, one object `{"path": ..., "hash": ..., ...}`. The
build itself lives in `scalerl.tiny`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

HELP = "build (or find cached) the tiny CPU model: Qwen2 + byte tokenizer + SFT warm start"


def configure(parser: argparse.ArgumentParser) -> None:
    from scalerl.models import TINY_MODELS

    parser.add_argument("--model", default="tiny", choices=TINY_MODELS,
                        help="which tiny model: tiny (default), or tiny-tools (its warm start "
                        "adds arith_tool tool-use traces)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write the model here instead of the cache "
                        "($SCALERL_CACHE/tiny/<recipe hash>, default ~/.cache/scalerl)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--json", action="store_true", help='print {"path": ...} as JSON')


def run(args: argparse.Namespace) -> int:
    from scalerl.tiny import ensure_tiny, tiny_recipe

    start = time.perf_counter()
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    path = ensure_tiny(tiny_recipe(args.model), out=args.out, force=args.force, log=log)
    info = json.loads((path / "tiny.json").read_text())
    if args.json:
        print(json.dumps({"path": str(path), "hash": info.get("hash"),
                          "heldout_pass1_t1": info.get("heldout_pass1_t1"),
                          "build_seconds": info.get("build_seconds"),
                          "seconds": round(time.perf_counter() - start, 2)}))
    else:
        print(f"tiny model: {path}")
        print(f"  held-out pass@1 at T=1: {info.get('heldout_pass1_t1')}, "
              f"built in {info.get('build_seconds')} s")
    return 0
