"""`scalerl generate`: scored rollouts of a model on a task's split, one JSONL row per rollout.

Rows (`Rollout.to_row()`) are written and flushed as each rollout finishes; a progress bar runs on
stderr and a summary (pass rate, interrupted/truncated fractions, tokens/s, scoring latency,
engine memory) follows. `--model tiny` uses the cached tiny model (built if missing). The engine
itself is `scalerl.rollout.engine.Generator`; this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from scalerl.envs.base import dumps

HELP = "generate scored rollouts with the vLLM engine (length budgets, forced interruption)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="Hugging Face model dir, or 'tiny' for the cached tiny model")
    parser.add_argument("--task", required=True, help="registered task (scalerl tasks list)")
    parser.add_argument("--split", default="test", help="split to sample from (default test)")
    parser.add_argument("--limit", type=int, help="first N samples of the split")
    parser.add_argument("--n", type=int, default=1, help="rollouts per sample (default 1)")
    parser.add_argument("--thinking-budget", metavar="A[:B]", default=None,
                        help="thinking tokens before forced interruption; A:B samples per "
                        "rollout; omit (or 'none') for models with no thinking format")
    parser.add_argument("--answer-budget", type=int, default=512,
                        help="tokens after </think> (natural or forced); default 512")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="hard cap on completion tokens, forced ones included")
    parser.add_argument("--temperature", type=float, default=1.0, help="default 1.0")
    parser.add_argument("--seed", type=int, default=0, help="per-rollout seeds derive from it")
    parser.add_argument("--out", required=True, help="output JSONL file")
    eng = parser.add_argument_group("engine")
    eng.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    eng.add_argument("--no-fp32-head", action="store_true", help="LM head in the model dtype")
    eng.add_argument("--kv-cache-gib", type=float, default=1.0, help="KV-cache GiB (default 1)")
    eng.add_argument("--memory-fraction", type=float, default=0.1,
                     help="vLLM gpu_memory_utilization (host memory on CPU); default 0.1")
    eng.add_argument("--max-model-len", type=int, default=None,
                     help="longest prompt + completion; default the model's "
                     "max_position_embeddings (at most 32768)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def resolve_model(name: str) -> str:
    if name == "tiny":
        from scalerl.tiny import ensure_tiny

        return str(ensure_tiny(log=lambda msg: print(msg, file=sys.stderr)))
    path = Path(name)
    if not (path / "config.json").exists():
        raise ValueError(f"--model {name!r}: no config.json there; give a Hugging Face model "
                         "directory or 'tiny'")
    return str(path)


def model_max_len(model: str, cap: int = 32768) -> int:
    config = json.loads((Path(model) / "config.json").read_text())
    return min(int(config.get("max_position_embeddings") or cap), cap)


def summarize(rollouts: list, seconds: float) -> dict:
    n = len(rollouts)
    reasons = collections.Counter(r.finish_reason for r in rollouts)
    statuses = collections.Counter(r.score.status for r in rollouts)
    sampled = sum(sum(lp is not None for lp in r.logprobs) for r in rollouts)
    return {
        "rollouts": n, "pass_rate": statuses["correct"] / n if n else 0.0,
        "statuses": dict(statuses),
        "interrupted_frac": reasons["interrupted"] / n if n else 0.0,
        "truncated_frac": reasons["truncated"] / n if n else 0.0,
        "sampled_tokens": sampled, "seconds": round(seconds, 2),
        "tokens_per_s": round(sampled / seconds, 1) if seconds > 0 else 0.0,
    }


def write_rollouts(gen, samples: list, *, out_path: str, n: int, budget, temperature: float,
                   seed: int, desc: str = "generate") -> dict:
    """Stream rollouts of `samples` into `out_path` (JSONL, flushed per row); the summary."""
    from tqdm import tqdm

    rollouts, correct = [], 0
    start = time.perf_counter()
    with open(out_path, "w") as out, tqdm(total=len(samples) * n, desc=desc, unit="rollout",
                                          file=sys.stderr) as bar:
        for r in gen.stream(samples, n=n, budget=budget, temperature=temperature, seed=seed):
            out.write(dumps(r.to_row()) + "\n")
            out.flush()
            rollouts.append(r)
            correct += r.score.correct
            bar.update(1)
            bar.set_postfix(pass_rate=f"{correct / len(rollouts):.2f}")
    summary = summarize(rollouts, time.perf_counter() - start)
    summary["score_latency"] = gen.default_scorer().latency()
    summary["engine_memory_mb"] = {k: round(v, 1) for k, v in gen.memory().items()}
    return summary


def run(args: argparse.Namespace) -> int:
    from scalerl.envs.registry import UnknownTaskError, get_task
    from scalerl.rollout.budget import parse_budget
    from scalerl.rollout.engine import EngineConfig, Generator

    try:
        task = get_task(args.task)
        task.check_split(args.split)
        budget = parse_budget(args.thinking_budget, args.answer_budget, args.max_tokens)
        config = EngineConfig(dtype=args.dtype, fp32_head=not args.no_fp32_head,
                              kv_cache_gib=args.kv_cache_gib, memory_fraction=args.memory_fraction,
                              seed=args.seed)
        if args.n <= 0:
            raise ValueError(f"--n must be > 0, got {args.n}")
        model = resolve_model(args.model)
        config = replace(config, max_model_len=args.max_model_len or model_max_len(model))
    except (ValueError, UnknownTaskError) as exc:
        print(f"scalerl generate: {exc}", file=sys.stderr)
        return 2
    samples = list(task.samples(args.split))[: args.limit]
    with Generator(model, config=config) as gen:
        summary = write_rollouts(gen, samples, out_path=args.out, n=args.n, budget=budget,
                                 temperature=args.temperature, seed=args.seed,
                                 desc=f"generate {args.task}")
    summary.update(model=model, task=args.task, split=args.split, out=args.out)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['rollouts']} rollouts of {args.task}/{args.split} -> {args.out}")
        print(f"  pass rate {summary['pass_rate']:.3f}  statuses {summary['statuses']}")
        print(f"  interrupted {summary['interrupted_frac']:.3f}  "
              f"truncated {summary['truncated_frac']:.3f}")
        print(f"  {summary['sampled_tokens']} sampled tokens in {summary['seconds']} s = "
              f"{summary['tokens_per_s']} tokens/s")
        print(f"  engine memory (MiB): {summary['engine_memory_mb']}")
    return 0
