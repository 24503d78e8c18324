"""`scalerl tiny [--model NAME] [--out DIR] [--json] [--force] [--check-tools [--limit N]]`.

Builds (or finds) a tiny CPU model and prints its directory; with `--json`, one object `{"path":
..., "hash": ..., ...}`. `--check-tools` measures a model's held-out pass@1 on a tool task with
the tool (a real sandbox session per episode) and without, by Hugging Face sampling at T=1
(`--model` may then also be a model directory, e.g. a run's checkpoint). The build lives in
`scalerl.tiny`, the tool loop in `scalerl.tiny.tools`; this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

HELP = "build (or find cached) the tiny CPU model: Qwen2 + byte tokenizer + SFT warm start"


def configure(parser: argparse.ArgumentParser) -> None:
    from scalerl.models import TINY_MODELS

    parser.add_argument("--model", default="tiny",
                        help=f"which tiny model: {', '.join(TINY_MODELS)} (tiny-tools: its warm "
                        "start adds arith_tool tool-use traces); with --check-tools also a model "
                        "directory")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write the model here instead of the cache "
                        "($SCALERL_CACHE/tiny/<recipe hash>, default ~/.cache/scalerl)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--json", action="store_true", help='print {"path": ...} as JSON')
    parser.add_argument("--check-tools", action="store_true",
                        help="held-out pass@1 of --model on --task with the tool and without "
                        "(HF sampling at T=1, one sample per problem), as JSON")
    parser.add_argument("--task", default="arith_tool", help="the tool task (--check-tools)")
    parser.add_argument("--limit", type=int, default=250,
                        help="held-out problems for --check-tools (default 250)")


def check_tools(model_name: str, *, task: str = "arith_tool", limit: int = 250,
                seed: int = 0) -> dict:
    """Held-out pass@1 of `model_name` on `task` with the tool (a real sandbox, this machine's
    default backend) and without, each sampled once per problem at T=1, with wall times."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scalerl.models import resolve_model
    from scalerl.sandbox.config import SandboxConfig
    from scalerl.sandbox.session import SessionPool
    from scalerl.tiny import sampled_pass_rate
    from scalerl.tiny.tools import tool_pass_rate

    torch.set_num_threads(1)
    path = resolve_model(model_name)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    start = time.perf_counter()
    with SessionPool(SandboxConfig(), warm=4) as pool:
        on = tool_pass_rate(model, tok, task, pool, limit=limit, seed=seed)
    mid = time.perf_counter()
    off = sampled_pass_rate(model, tok, task, limit=limit, seed=seed, max_new_tokens=128)
    return {"model": path, "task": task, "limit": limit, "tools_on": on,
            "tools_off": {"pass1": off}, "seconds_on": round(mid - start, 1),
            "seconds_off": round(time.perf_counter() - mid, 1)}


def run(args: argparse.Namespace) -> int:
    from scalerl.models import TINY_MODELS
    from scalerl.tiny import ensure_tiny, tiny_recipe

    if args.check_tools:
        if args.limit < 1:
            print(f"scalerl tiny: --limit must be >= 1, got {args.limit}", file=sys.stderr)
            return 2
        try:
            print(json.dumps(check_tools(args.model, task=args.task, limit=args.limit)))
        except (ValueError, OSError) as exc:
            print(f"scalerl tiny: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.model not in TINY_MODELS:
        print(f"scalerl tiny: --model {args.model!r}: expected one of {', '.join(TINY_MODELS)}",
              file=sys.stderr)
        return 2

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
