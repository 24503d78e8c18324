"""`scalerl generate`: scored rollouts of a model on a task's split, one JSONL row per rollout.

Rows (`Rollout.to_row()`) are written and flushed as each rollout finishes; a progress bar runs on
stderr and a summary (pass rate, interrupted/truncated fractions, tokens/s, scoring latency,
engine memory) follows. `--model tiny` uses the cached tiny model (built if missing); `--spec`,
`--data` and `--revision` are the task flags every command shares (scalerl/local_data.py). The
engine is `scalerl.rollout.engine.EngineGenerator`, or vLLM servers with `--server URL` (rollout/
server_generator.py: the same rollouts for the same seeds). `generate(args)` does the work (what
`run` and `scalerl.api.generate` call: without `out` no file is written); `run` parses arguments
and prints.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.commands import CommandError
from scalerl.commands.engine_args import (
    DEFAULT_BUDGET,
    EngineStartError,
    add_budget_args,
    add_engine_args,
    add_grading_args,
    add_tool_args,
    engine_config,
    grading,
    model_of,
    override_budget,
    start_generator,
    with_tool_args,
)
from scalerl.envs.base import dumps
from scalerl.local_data import add_task_args

HELP = "generate scored rollouts with the vLLM engine (length budgets, forced interruption)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model",
                        help="Hugging Face model dir, hub id, or 'tiny' for the cached tiny "
                        "model; with --server, default: what the server serves")
    parser.add_argument("--task", required=True, help="registered task (scalerl tasks list)")
    parser.add_argument("--split", default="test", help="split to sample from (default test)")
    parser.add_argument("--limit", type=int,
                        help="N evenly spaced samples of the split (as scalerl eval)")
    parser.add_argument("--n", type=int, default=1, help="rollouts per sample (default 1)")
    parser.add_argument("--temperature", type=float, default=1.0, help="default 1.0")
    parser.add_argument("--seed", type=int, default=0, help="per-rollout seeds derive from it")
    parser.add_argument("--out", required=True, help="output JSONL file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_task_args(parser)
    add_budget_args(parser)
    add_engine_args(parser)
    add_grading_args(parser)
    add_tool_args(parser)


def summarize(rollouts: list, seconds: float) -> dict:
    n = len(rollouts)
    reasons = collections.Counter(r.finish_reason for r in rollouts)
    statuses = collections.Counter(r.score.status for r in rollouts)
    sampled = sum(sum(lp is not None for lp in r.logprobs) for r in rollouts)
    turns = {}
    if any(r.turns for r in rollouts):  # multi-turn: as eval reports them (rollout/heldout.py)
        from scalerl.rollout.heldout import aggregate

        overall = aggregate(rollouts).overall
        turns = {"turns_mean": overall.turns_mean, "tool_calls_mean": overall.tool_calls_mean,
                 "tool_error_frac": overall.tool_error_frac}
    return turns | {
        "rollouts": n, "pass_rate": statuses["correct"] / n if n else 0.0,
        "statuses": dict(statuses),
        "interrupted_frac": sum(r.interrupted for r in rollouts) / n if n else 0.0,
        "truncated_frac": reasons["truncated"] / n if n else 0.0,
        "sampled_tokens": sampled, "seconds": round(seconds, 2),
        "tokens_per_s": round(sampled / seconds, 1) if seconds > 0 else 0.0,
    }


def write_rollouts(gen, samples: list, *, out_path: str, n: int, budget, temperature: float,
                   seed: int, desc: str = "generate") -> dict:
    """Stream rollouts of `samples` into `out_path` (JSONL, flushed per row); the summary."""
    return stream_rollouts(gen, samples, out_path=out_path, n=n, budget=budget,
                           temperature=temperature, seed=seed, desc=desc)[1]


def stream_rollouts(gen, samples: list, *, out_path: str | None, n: int, budget,
                    temperature: float, seed: int, desc: str = "generate") -> tuple[list, dict]:
    """(the rollouts of `samples`, their summary), each rollout written to `out_path` (JSONL,
    flushed per row) as it finishes when a path is given."""
    from tqdm import tqdm

    rollouts, correct = [], 0
    start = time.perf_counter()
    out = open(out_path, "w") if out_path else None  # noqa: SIM115 - closed below
    try:
        with tqdm(total=len(samples) * n, desc=desc, unit="rollout", file=sys.stderr) as bar:
            for r in gen.stream(samples, n=n, budget=budget, temperature=temperature, seed=seed):
                if out is not None:
                    out.write(dumps(r.to_row()) + "\n")
                    out.flush()
                rollouts.append(r)
                correct += r.score.correct
                bar.update(1)
                bar.set_postfix(pass_rate=f"{correct / len(rollouts):.2f}")
    finally:
        if out is not None:
            out.close()
    summary = summarize(rollouts, time.perf_counter() - start)
    summary["score_latency"] = gen.scorer.latency()
    summary["engine_memory_mb"] = {k: round(v, 1) for k, v in gen.memory().items()}
    return rollouts, summary


def prepare(args: argparse.Namespace):
    """(task, samples, budget, model, engine config); ValueError, or PreflightError when the
    task's verifier cannot work here, before any model is built or engine started."""
    from scalerl.envs.preflight import check_tasks
    from scalerl.local_data import sources_from_args, unused_note
    from scalerl.rollout.heldout import eval_samples

    if args.n <= 0 or (args.limit is not None and args.limit <= 0):
        raise ValueError(f"--n and --limit must be > 0, got {args.n} and {args.limit}")
    sources = sources_from_args(args)
    task = sources.task(args.task)
    note = unused_note("generate", sources, [args.task])
    if note:
        print(note, file=sys.stderr)
    task = with_tool_args(args, {args.task: task})[args.task]
    check_tasks([task], grading(args))
    samples = eval_samples(task, args.split, args.limit)
    budget = override_budget(args, DEFAULT_BUDGET)
    model = model_of(args)
    config = dataclasses.replace(engine_config(args, model), seed=args.seed)
    return task, samples, budget, model, config


@dataclass(frozen=True)
class Generated:
    """What one `scalerl generate` made: its rollouts and the summary `--json` prints."""

    rollouts: tuple
    """The scored Rollouts (rollout/types.py), in the order they finished."""
    summary: dict[str, Any]
    log: Path | None
    """Where the engine's own output went (None: on the terminal, or vLLM servers)."""


def generate(args: argparse.Namespace) -> Generated:
    """Check the settings, start the engine, stream and score the rollouts (into `args.out`
    when given); CommandError with the line (and exit status) `scalerl generate` prints."""
    from scalerl.ending import close_pools
    from scalerl.envs.preflight import PREFLIGHT_EXIT, PreflightError
    from scalerl.envs.registry import UnknownTaskError
    from scalerl.rollout.scorer import Scorer

    log = engine_log_path(args)
    if log is not None:
        from scalerl.engine_log import tracker_into

        tracker_into(log)
    try:
        task, samples, budget, model, config = prepare(args)
        gen = start_generator(model, config, fp32_head=args.fp32_head is not False,
                              scorer=Scorer([task], grading(args)), log=log)
    except PreflightError as exc:
        raise CommandError(exc.lines("generate"), PREFLIGHT_EXIT) from None
    except (ValueError, UnknownTaskError, EngineStartError) as exc:
        raise CommandError(f"scalerl generate: {exc}") from None
    with gen:
        rollouts, summary = stream_rollouts(
            gen, samples, out_path=args.out, n=args.n, budget=budget,
            temperature=args.temperature, seed=args.seed, desc=f"generate {args.task}")
    close_pools()
    summary.update(model=model, task=args.task, split=args.split, out=args.out)
    return Generated(tuple(rollouts), summary, None if config.servers else log)


def run(args: argparse.Namespace) -> int:
    try:
        done = generate(args)
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    summary = done.summary
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    sys.stdout.flush()
    if done.log is not None:
        print(f"scalerl generate: done; the vLLM engine's own output is in {done.log}",
              file=sys.stderr)
    return 0


def print_summary(summary: dict) -> None:
    print(f"{summary['rollouts']} rollouts of {summary['task']}/{summary['split']} -> "
          f"{summary['out']}")
    print(f"  pass rate {summary['pass_rate']:.3f}  statuses {summary['statuses']}")
    print(f"  interrupted {summary['interrupted_frac']:.3f}  "
          f"truncated {summary['truncated_frac']:.3f}")
    print(f"  {summary['sampled_tokens']} sampled tokens in {summary['seconds']} s = "
          f"{summary['tokens_per_s']} tokens/s")
    if "turns_mean" in summary:
        print(f"  turns {summary['turns_mean']:.2f}  tool calls "
              f"{summary['tool_calls_mean']:.2f}  failed calls {summary['tool_error_frac']}")
    print(f"  engine memory (MiB): {summary['engine_memory_mb']}")


def engine_log_path(args: argparse.Namespace) -> Path | None:
    """Where an engine started here writes: `<out>` with the suffix `.engine.log`, or without
    `out` (the Python API) a file in the temporary directory; None with `--verbose` (on the
    terminal)."""
    import tempfile

    if args.verbose:
        return None
    if not args.out:
        return Path(tempfile.gettempdir()) / f"scalerl-generate-{os.getpid()}.engine.log"
    return Path(args.out).with_suffix(".engine.log")
