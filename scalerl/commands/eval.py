"""`scalerl eval`: held-out pass@k / mean@n of checkpoints, or of existing scored rollouts.

`--rollouts FILE` aggregates rows (`scalerl generate` output) without a model; `--model PATH...`
generates through the vLLM engine with a per-sample cache in `--out DIR/cache` and writes
results.json, results.md and (for several checkpoints) results.png, and with `--log-with` sends
them to experiment trackers (scalerl/eval_tracking.py). The estimators are
`scalerl.rollout.heldout`'s (shared with the trainer's validation); the files are
`scalerl.eval_report`'s. This module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scalerl.commands.engine_args import (
    DEFAULT_BUDGET,
    EngineStartError,
    add_budget_args,
    add_engine_args,
    add_grading_args,
    engine_config,
    grading,
    override_budget,
    served_model,
    start_generator,
)
from scalerl.envs.grading import Grading
from scalerl.rollout.engine_config import EngineConfig

HELP = "evaluate checkpoints on held-out sets (unbiased pass@k, mean@n), or aggregate rollouts"


@dataclass(frozen=True)
class Plan:
    """What a --model evaluation runs: settings, checkpoints, and how to start the engine."""

    settings: Any
    models: list
    engine: EngineConfig
    fp32_head: bool
    tasks: dict
    """The Task objects evaluated, by name (what the generator's scorer renders and scores)."""
    grading: Grading
    """How they are graded: the run's sandbox and verifier settings, else this machine's."""
    project: str = "scalerl"
    """The experiment trackers' project (`--log-with`): the run's `log.project`, else scalerl."""
    run_name: str = "eval"
    """The tracked evaluation's name: `<run dir name>-eval`, else `--out`'s folder name."""


def configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--rollouts", metavar="FILE",
                     help="aggregate scored rollouts (JSONL rows with task, sample_id, status)")
    src.add_argument("--model", nargs="+", metavar="PATH",
                     help="model dirs, run dirs (their checkpoints/step-N) or checkpoints/ dirs; "
                     "a run dir also gives the defaults: its tasks, per-task budgets, "
                     "temperature and engine settings (config.yaml); with --server, default: "
                     "what the server serves")
    parser.add_argument("--k", default="1,4,8", metavar="K[,K...]",
                        help="pass@k values (default 1,4,8); k above a sample's rollouts: null")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--log-with", metavar="A,B",
                        help="with --model: also send the results to these experiment trackers "
                             "(Accelerate's: wandb, trackio, mlflow, tensorboard, ...), one "
                             "step per checkpoint (docs/tracking.md)")
    g = parser.add_argument_group("with --model")
    g.add_argument("--tasks", metavar="A,B",
                   help="registered task names (scalerl tasks list); default: the run's")
    g.add_argument("--split", default="test", help="held-out split (default test)")
    g.add_argument("--n", type=int, default=8, help="rollouts per sample (default 8)")
    g.add_argument("--temperature", type=float,
                   help="sampling temperature (default: the run's validation temperature, else 1)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (per rollout: seed, "
                                                       "sample id, group)")
    g.add_argument("--limit", type=int, help="N evenly spaced samples of each task's split")
    g.add_argument("--out", metavar="DIR", help="results.json, results.md, results.png, cache/")
    g.add_argument("--chunk", type=int, default=64,
                   help="samples per generation call (the unit saved to the cache)")
    add_budget_args(parser)
    add_engine_args(parser)
    add_grading_args(parser)


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in text.split(",") if k.strip()}))
    except ValueError:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8"
                         ) from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8")
    return ks


def print_report(report: dict, ks: tuple[int, ...]) -> None:
    from scalerl.eval_report import task_table

    print("\n".join(task_table(report, ks)))
    notes = sorted({n for d in [*report["tasks"].values(), report["overall"]]
                    for n in d.get("notes", [])})
    for n in notes:
        print(f"note: {n}")


def run_rollouts(args, ks) -> int:
    from scalerl.eval_report import read_rollout_records
    from scalerl.rollout.heldout import aggregate

    report = aggregate(read_rollout_records(args.rollouts), ks).to_dict()
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report, ks)
    return 0


def run_dir_of(paths: list[str]) -> Path | None:
    """The training run the first of `paths` belongs to (a run dir, its checkpoints/ folder or
    one checkpoint), or None when it is no run's."""
    path = Path(paths[0]).resolve()
    for run_dir in (path, path.parent, path.parent.parent):
        if (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints").is_dir():
            return run_dir
    return None


def run_config_of(paths: list[str]):
    """The config.yaml of the training run the first of `paths` belongs to, or None."""
    from scalerl.config import config_from_data

    run_dir = run_dir_of(paths)
    if run_dir is None:
        return None
    return config_from_data(yaml.safe_load((run_dir / "config.yaml").read_text()) or {})


def prepare(args, ks) -> Plan:
    """Settings, models and engine of a --model run; ValueError before any engine starts."""
    from scalerl.envs.catalog import get_task
    from scalerl.eval_report import EvalSettings, resolve_models
    from scalerl.preflight import check_tasks

    if args.n < 1 or (args.limit is not None and args.limit < 1) or args.chunk < 1:
        raise ValueError("--n, --limit and --chunk must be >= 1")
    if not args.model:
        if not args.server:
            raise ValueError("give --rollouts FILE, or --model PATH (or --server URL: the "
                             "server says what it serves)")
        args.model = [served_model(args.server)]
    run_cfg = run_config_of(args.model)
    if not args.out or not (args.tasks or run_cfg):
        raise ValueError("--model needs --out DIR, and --tasks A,B unless it is a run dir "
                         "(whose config.yaml names its tasks)")
    tasks = tuple(t for t in args.tasks.split(",") if t) if args.tasks else tuple(
        t.name for t in run_cfg.tasks)
    objects = {t: get_task(t) for t in tasks}
    for task in objects.values():
        task.check_split(args.split)
    graded = grading(args, run_cfg.grading if run_cfg is not None else None)  # as it trained
    check_tasks(objects.values(), graded)
    run_budgets = {t.name: t.budget for t in run_cfg.tasks} if run_cfg else {}
    budgets = tuple((t, override_budget(args, run_budgets.get(t, DEFAULT_BUDGET))) for t in tasks)
    models = resolve_models(args.model)
    settings = EvalSettings(tasks=tasks, split=args.split, n=args.n, ks=ks,
                            temperature=_temperature(args, run_cfg), seed=args.seed,
                            budget=override_budget(args, DEFAULT_BUDGET), budgets=budgets,
                            limit=args.limit)
    engine = engine_config(args, models[0].path, run_cfg.engine if run_cfg else None)
    fp32_head = args.fp32_head if args.fp32_head is not None else (
        run_cfg.policy.fp32_head if run_cfg else True)
    run_dir = run_dir_of(args.model)
    return Plan(settings, models, engine, fp32_head, objects, graded,
                project=run_cfg.log.project if run_cfg else "scalerl",
                run_name=f"{run_dir.name}-eval" if run_dir else Path(args.out).resolve().name)


def _temperature(args, run_cfg) -> float:
    if args.temperature is not None:
        return args.temperature
    if run_cfg is None:
        return 1.0
    return run_cfg.val.temperature if run_cfg.val.temperature is not None else (
        run_cfg.policy.temperature)


def run_models(args, plan: Plan) -> int:
    from scalerl.eval_report import run_eval
    from scalerl.training import make_scorer

    def make_generator(path: str):
        return start_generator(path, plan.engine, fp32_head=plan.fp32_head,
                               scorer=make_scorer(plan.tasks, plan.grading))

    try:
        results = run_eval(plan.models, plan.settings, args.out, make_generator, chunk=args.chunk)
    except EngineStartError as exc:
        print(f"scalerl eval: {exc}", file=sys.stderr)
        return 2
    if args.log_with:
        track(results, args, plan)
    if args.json:
        print(json.dumps(results))
        return 0
    for e in results["models"]:
        print(f"## {e['label']} ({e['generated_samples']} samples generated, "
              f"{e['cached_samples']} cached)")
        print_report(e, plan.settings.ks)
    print(f"wrote {args.out}/results.json, {args.out}/results.md"
          + (f", {args.out}/results.png" if len(results["models"]) > 1 else ""))
    return 0


def tracker_names(text: str) -> tuple[str, ...]:
    """`--log-with a,b` -> names, each one of Accelerate's trackers (ValueError otherwise)."""
    from scalerl.trainer.trackers import TRACKERS

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in TRACKERS]
    if unknown or not names:
        raise ValueError(f"--log-with {text!r}: allowed: {', '.join(TRACKERS.names())}")
    return names


def track(results: dict, args, plan: Plan) -> None:
    """The results to the `--log-with` trackers (one warning per tracker that cannot start)."""
    from scalerl.eval_tracking import eval_run, log_results
    from scalerl.training import versions

    run = eval_run(args.out, plan.project, plan.run_name)
    log_results(results, tracker_names(args.log_with), run, {"versions": versions()})


def run(args: argparse.Namespace) -> int:
    from scalerl.coerce import ConfigError
    from scalerl.envs.registry import UnknownTaskError
    from scalerl.eval_report import EvalInputError
    from scalerl.preflight import PREFLIGHT_EXIT, PreflightError

    try:
        ks = parse_ks(args.k)
        if args.log_with:
            tracker_names(args.log_with)  # a bad name fails before anything runs
            if args.rollouts:
                raise ValueError("--log-with goes with --model (checkpoints evaluated here)")
        if args.rollouts:
            return run_rollouts(args, ks)
        plan = prepare(args, ks)
    except PreflightError as exc:
        print(exc.lines("eval"), file=sys.stderr)
        return PREFLIGHT_EXIT
    except (EvalInputError, UnknownTaskError, ConfigError, ValueError) as exc:
        print(f"scalerl eval: {exc}", file=sys.stderr)
        return 2
    return run_models(args, plan)
