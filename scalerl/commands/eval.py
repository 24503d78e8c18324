"""`scalerl eval`: held-out pass@k / mean@n of checkpoints, or of existing scored rollouts.

`--rollouts FILE` aggregates rows (`scalerl generate` output) without a model; `--model PATH...`
generates through the vLLM engine with a per-sample cache in `--out DIR/cache` and writes
results.json, results.md and (for several checkpoints) results.png. The estimators are
`scalerl.rollout.evaluate`'s (shared with the trainer's validation); the files are
`scalerl.eval`'s. This module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "evaluate checkpoints on held-out sets (unbiased pass@k, mean@n), or aggregate rollouts"


def configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--rollouts", metavar="FILE",
                     help="aggregate scored rollouts (JSONL rows with task, sample_id, status)")
    src.add_argument("--model", nargs="+", metavar="PATH",
                     help="model dirs, run dirs (their checkpoints/step-N) or checkpoints/ dirs")
    parser.add_argument("--k", default="1,4,8", metavar="K[,K...]",
                        help="pass@k values (default 1,4,8); k above a sample's rollouts: null")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    g = parser.add_argument_group("with --model")
    g.add_argument("--tasks", metavar="A,B", help="registered task names (scalerl tasks list)")
    g.add_argument("--split", default="test", help="held-out split (default test)")
    g.add_argument("--n", type=int, default=8, help="rollouts per sample (default 8)")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    g.add_argument("--thinking-budget", metavar="A[:B]",
                   help="thinking tokens before forced interruption (a range samples per rollout)")
    g.add_argument("--answer-budget", type=int, default=512, help="tokens after </think>")
    g.add_argument("--max-tokens", type=int, help="hard cap on generated tokens")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (per rollout: seed, "
                                                       "sample id, group)")
    g.add_argument("--limit", type=int, help="N evenly spaced samples of each task's split")
    g.add_argument("--out", metavar="DIR", help="results.json, results.md, results.png, cache/")
    g.add_argument("--chunk", type=int, default=64,
                   help="samples per generation call (the unit saved to the cache)")
    g.add_argument("--max-model-len", type=int, default=2048, help="engine context length")
    g.add_argument("--kv-cache-gib", type=int, default=1,
                   help="engine KV-cache GiB (whole GiB: VLLM_CPU_KVCACHE_SPACE is an integer)")


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in text.split(",") if k.strip()}))
    except ValueError:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8"
                         ) from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8")
    return ks


def parse_budget(thinking: str | None, answer: int, max_tokens: int | None):
    from scalerl.rollout.types import Budget

    think: int | tuple[int, int] | None = None
    if thinking:
        try:
            parts = [int(p) for p in thinking.split(":")]
        except ValueError:
            raise ValueError(f"--thinking-budget {thinking!r}: expected N or LOW:HIGH") from None
        if len(parts) not in (1, 2):
            raise ValueError(f"--thinking-budget {thinking!r}: expected N or LOW:HIGH")
        think = parts[0] if len(parts) == 1 else (parts[0], parts[1])
    return Budget(thinking=think, answer=answer, total=max_tokens)


def print_report(report: dict, ks: tuple[int, ...]) -> None:
    from scalerl.eval import task_table

    print("\n".join(task_table(report, ks)))
    notes = sorted({n for d in [*report["tasks"].values(), report["overall"]]
                    for n in d.get("notes", [])})
    for n in notes:
        print(f"note: {n}")


def run_rollouts(args, ks) -> int:
    from scalerl.eval import read_rollout_records
    from scalerl.rollout.evaluate import aggregate

    report = aggregate(read_rollout_records(args.rollouts), ks).to_dict()
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report, ks)
    return 0


def prepare(args, ks):
    """Settings and models of a --model run; raises ValueError before any engine starts."""
    from scalerl.envs.registry import get_task
    from scalerl.eval import EvalSettings, resolve_models

    if not args.tasks or not args.out:
        raise ValueError("--model needs --tasks A,B and --out DIR")
    if args.n < 1 or (args.limit is not None and args.limit < 1) or args.chunk < 1:
        raise ValueError("--n, --limit and --chunk must be >= 1")
    tasks = tuple(t for t in args.tasks.split(",") if t)
    for t in tasks:
        get_task(t).check_split(args.split)
    settings = EvalSettings(tasks=tasks, split=args.split, n=args.n, ks=ks,
                            temperature=args.temperature, seed=args.seed,
                            budget=parse_budget(args.thinking_budget, args.answer_budget,
                                                args.max_tokens), limit=args.limit)
    return settings, resolve_models(args.model)


def run_models(args, settings, models) -> int:
    from scalerl.eval import run_eval

    def make_generator(path: str):
        from scalerl.rollout.engine import EngineConfig, Generator

        return Generator(path, config=EngineConfig(max_model_len=args.max_model_len,
                                                   kv_cache_gib=args.kv_cache_gib))

    results = run_eval(models, settings, args.out, make_generator, chunk=args.chunk)
    if args.json:
        print(json.dumps(results))
        return 0
    for e in results["models"]:
        print(f"## {e['label']} ({e['generated_samples']} samples generated, "
              f"{e['cached_samples']} cached)")
        print_report(e, settings.ks)
    print(f"wrote {args.out}/results.json, {args.out}/results.md"
          + (f", {args.out}/results.png" if len(results["models"]) > 1 else ""))
    return 0


def run(args: argparse.Namespace) -> int:
    from scalerl.envs.registry import UnknownTaskError
    from scalerl.eval import EvalInputError

    try:
        ks = parse_ks(args.k)
        if args.rollouts:
            return run_rollouts(args, ks)
        settings, models = prepare(args, ks)
    except (EvalInputError, UnknownTaskError, ValueError) as exc:
        print(f"scalerl eval: {exc}", file=sys.stderr)
        return 2
    return run_models(args, settings, models)
