"""`scalerl train`: RL-train a policy with a ScaleRL recipe (default: the tiny CPU model).

Loads and validates the config (a recipe name or YAML file plus `--set a.b=c` overrides; with
`--resume`, the run's own config.yaml, where `--set` may change only the resumable settings),
runs the preflight (every task's verifier must work here) before any model or engine starts, then
`scalerl.training.run_training`. Prints held-out pass@1 per task before and after, a warning per
task whose held-out error rate passed 5%, the wall time and the peak resident memory of the whole
process tree. The engine's own output goes to <run-dir>/engine.log unless `--verbose`.
`--dry-run` sizes the run instead (scalerl/planning/dry_run.py) and starts nothing. `train(args)`
is the run itself, config to summary.json (what `run` and `scalerl.api.train` call); `run` adds
the printing, `--print-config` and `--dry-run`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from scalerl.commands import CommandError
from scalerl.commands.train_run import Trained, rank0, train_command
from scalerl.config import (
    DEFAULT_RECIPE,
    ConfigError,
    RunConfig,
    config_from_data,
    load_config,
    recipe_names,
    resume_config,
    to_dict,
    validate,
)
from scalerl.local_data import Sources, add_task_args, sources_from_args, unused_note

HELP = "train a policy with a ScaleRL recipe (no config: the tiny model on arith + synth_code)"
EXIT_CODES = {0: "the run finished", 1: "it crashed (the traceback names the cause)",
              2: "bad input: config, flags, run directory", 3: "preflight: a task's verifier "
              "cannot work on this machine (nothing started)", 4: "stopped early: verifier "
              "errors above filters.max_error_frac (a checkpoint was written; fix, then "
              "--resume)",
              75: "stopped early: generation unavailable (no server, a publish timed out, the "
              "engine died or did not start within engine.start_timeout_s) or SIGTERM/SIGUSR1 "
              "(a checkpoint was written when a step had run; --resume continues)",
              130: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)"}
"""Exit status -> meaning (also in the README)."""
VAL_ERROR_WARN = 0.05
"""Held-out `error` share per task above which the end-of-run summary warns."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
    parser.add_argument("--config", default=None,
                        help=f"recipe name ({', '.join(recipe_names())}) or YAML file; "
                             "default: tiny-cpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set loss.name=grpo (repeatable); "
                             "with --resume only steps, val.*, checkpoint.*, log.*, sandbox.* "
                             "and filters.max_error_frac/error_patience")
    parser.add_argument("--run-dir", default=None,
                        help="where metrics, samples, TensorBoard and checkpoints go (default: "
                             "runs/<recipe>-<time>)")
    parser.add_argument("--log-with", default=None, metavar="A,B",
                        help="experiment trackers, Accelerate's (tensorboard, wandb, trackio, "
                             "mlflow, ...): sets log.trackers (default: tensorboard; docs/"
                             "tracking.md)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --run-dir from its last checkpoint, with its "
                             "own config.yaml")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved, validated config as YAML and exit")
    parser.add_argument("--verbose", action="store_true",
                        help="show the vLLM engine's own output (default: <run-dir>/engine.log)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build the model on meta from its config.json, print the placement "
                             "and the memory per GPU, exit 2 if it cannot fit; nothing starts")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="with --dry-run: GPUs per node (default: those this machine sees)")
    parser.add_argument("--gpu-gib", type=float, default=None, metavar="G",
                        help="with --dry-run: memory of each GPU (default: this machine's)")
    parser.add_argument("--ranks", type=int, default=None, metavar="R",
                        help="with --dry-run: trainer processes per node (default: the "
                             "launcher's, else the split the throughput model predicts "
                             "fastest)")
    parser.add_argument("--gpu", default=None, metavar="NAME",
                        help="with --dry-run: the GPU model for the throughput plan (H100-SXM, "
                             "H200-SXM, A100-80GB, ...; default: this machine's, else by "
                             "--gpu-gib)")
    parser.add_argument("--completion-tokens", type=int, default=None, metavar="N",
                        help="with --dry-run: mean completion length (default: half the "
                             "longest the budgets allow; a run's rollout/length_mean)")
    parser.add_argument("--prompt-tokens", type=int, default=None, metavar="N",
                        help="with --dry-run: mean prompt length (default 512)")
    parser.add_argument("--completion-rms", type=int, default=None, metavar="N",
                        help="with --dry-run: root mean square completion length, sqrt(E[L^2]) "
                             "from a run's length histogram (default: lengths even over [0, 2 x "
                             "mean]); running sequences are length-biased")
    add_task_args(parser)


def resolve_run_dir(args: argparse.Namespace) -> Path:
    if args.resume and not args.run_dir:
        raise ConfigError("--resume needs --run-dir (the run to continue)")
    if args.run_dir:
        return Path(args.run_dir)
    name = Path(args.config).stem if args.config else "tiny-cpu"
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def resumed_config(args: argparse.Namespace, run_dir: Path) -> tuple[RunConfig, dict]:
    """The run's own config.yaml with the resumable `--set`s, and what they changed."""
    import yaml

    if args.config:
        raise ConfigError("--resume continues the run with its own config.yaml; --config "
                          "cannot be given with it")
    from scalerl.trainer.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir) is None:
        raise ConfigError(f"scalerl train: --resume: no checkpoint under {run_dir}/checkpoints")
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--resume: {path} is missing (the run's settings); cannot resume")
    cfg, changes = resume_config(yaml.safe_load(path.read_text()) or {}, args.set)
    return validate(cfg), changes


def with_sources(cfg: RunConfig, sources: Sources, resume: bool) -> tuple[RunConfig, Sources]:
    """`cfg` with each `--data NAME=PATH` / `--revision NAME=REV` of a mixture task as its
    `data:` / `revision:`, and the rest for the start-up contamination check of the built-in
    benchmarks (a NAME of any other task is not used: `unused_note`); ConfigError when they
    come with `--resume` (the run's config.yaml names its tasks' data)."""
    import dataclasses

    from scalerl.envs.registry import family
    from scalerl.local_data import data_for

    if (sources.data or sources.revisions) and resume:
        raise ConfigError("--data and --revision cannot be given with --resume (the run's "
                          "config.yaml names its tasks' data and revisions)")
    names = {t.name for t in cfg.tasks} | {family(t.name) for t in cfg.tasks}
    try:
        tasks = tuple(dataclasses.replace(
            t, data=data_for(t.name, sources.data) or t.data,
            revision=data_for(t.name, sources.revisions) or t.revision) for t in cfg.tasks)
    except ValueError as exc:
        raise ConfigError(f"tasks: {' '.join(str(exc).split())}") from None
    rest = Sources({k: v for k, v in sources.data.items() if k not in names},
                   {k: v for k, v in sources.revisions.items() if k not in names})
    return dataclasses.replace(cfg, tasks=tasks), rest


def _sources(args: argparse.Namespace) -> Sources:
    try:
        return sources_from_args(args)
    except ValueError as exc:
        raise ConfigError(f"scalerl train: {exc}") from None


def configured(args: argparse.Namespace, base: RunConfig | None = None
               ) -> tuple[RunConfig, Sources, dict, Path]:
    """(the run's config, `--data`/`--revision` sources outside its mixture, what a resume's
    `--set` changed, the run dir): `base` (a RunConfig: `scalerl.api.train`), else `--config`,
    else the run's own config.yaml with `--resume`, with the `--set`s; ConfigError (one line)."""
    changes: dict = {}
    if args.log_with is not None:  # the same as --set log.trackers=[...] (after any --set)
        args.set = [*args.set, f"log.trackers=[{args.log_with}]"]
    run_dir = resolve_run_dir(args)
    if args.resume:
        if base is not None:
            raise ConfigError("--resume continues the run with its own config.yaml; a config "
                              "cannot be given with it")
        cfg, changes = resumed_config(args, run_dir)
    elif base is not None:
        cfg = config_from_data(to_dict(base), args.set)
    else:
        cfg = load_config(args.config, args.set)
    cfg, copies = with_sources(cfg, _sources(args), args.resume)
    if not args.dry_run:  # a dry run sizes the run: its tasks need not be registered here
        cfg = validate(cfg)
    _note_unused(cfg, copies)
    return cfg, copies, changes, run_dir


def run(args: argparse.Namespace) -> int:
    if args.print_config or args.dry_run:
        try:
            cfg = configured(args)[0]
        except ConfigError as e:
            print(str(e), file=sys.stderr)
            return 2
        if not args.print_config:
            return dry_run_command(cfg, args)
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    try:
        done = train(args)
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    if done is None:
        return 0
    print_report(done)
    if done.summary["stopped"]:
        print(stopped_line(done), file=sys.stderr)
        return 4
    return 0


def train(args: argparse.Namespace, base: RunConfig | None = None) -> Trained | None:
    """The run `args` asks for (on `base`, a RunConfig, when given): config, preflight, then
    train to summary.json. CommandError with the line (and exit status) `scalerl train` prints
    for bad input (2), a preflight (3) and generation unavailable (75); a run stopped on
    verifier errors is returned (`summary["stopped"]`). None on ranks other than 0."""
    from scalerl.envs.preflight import PREFLIGHT_EXIT, PreflightError
    from scalerl.training import contamination_warnings, preflight

    try:
        cfg, copies, changes, run_dir = configured(args, base)
    except ConfigError as e:
        raise CommandError(str(e)) from None
    try:
        preflight(cfg)
    except PreflightError as e:
        raise CommandError(e.lines("train"), PREFLIGHT_EXIT) from None
    for line in contamination_warnings(cfg, copies):
        print(f"scalerl train: {line}", file=sys.stderr)
    recipe = None if args.resume or base is not None else (args.config or DEFAULT_RECIPE)
    return train_command(cfg, run_dir, resume=args.resume, changes=changes,
                         verbose=args.verbose, recipe=recipe)


def stopped_line(done: Trained) -> str:
    """What a run stopped on verifier errors (exit 4) says last."""
    return (f"scalerl train: stopped at step {done.summary['steps']}: {done.summary['stopped']}; "
            f"checkpoint written: fix the verifier, then `scalerl train --run-dir {done.run_dir} "
            "--resume`")


def _note_unused(cfg: RunConfig, copies: Sources) -> None:
    """One note line for `--data`/`--revision` NAMEs neither in the mixture nor a built-in
    benchmark (whose copies the start-up contamination check reads)."""
    from scalerl.envs.bench import BENCHMARKS

    used = [t.name for t in cfg.tasks] + [n for n, b in BENCHMARKS.items()
                                          if b.role == "benchmark"]
    note = unused_note("train", copies, used)
    if note:
        print(note, file=sys.stderr)


def dry_run_command(cfg: RunConfig, args: argparse.Namespace) -> int:
    """`--dry-run`: the placement and memory per GPU (scalerl/planning/dry_run.py); exit 2
    with one line when the layout cannot fit. Under a launcher only rank 0 prints."""
    from scalerl.planning.dry_run import describe, dry_run
    from scalerl.planning.placement import PlacementError
    from scalerl.planning.throughput import GPUS

    if not rank0():
        return 0
    for flag in ("gpus", "ranks", "completion_tokens", "prompt_tokens", "completion_rms"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"scalerl train: --{flag.replace('_', '-')} must be >= 1, got "
                  f"{getattr(args, flag)}", file=sys.stderr)
            return 2
    if args.gpu is not None and args.gpu not in GPUS:
        print(f"scalerl train: --gpu {args.gpu!r}: known GPUs are {', '.join(GPUS)}",
              file=sys.stderr)
        return 2
    try:
        plan = dry_run(cfg, gpus=args.gpus, gpu_gib=args.gpu_gib, ranks=args.ranks,
                       gpu_name=args.gpu, completion_tokens=args.completion_tokens,
                       prompt_tokens=args.prompt_tokens, recipe=args.config,
                       completion_rms=args.completion_rms)
    except (PlacementError, OSError, ValueError) as e:
        print(f"scalerl train: --dry-run: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan.to_json()))
        for line in plan.speed.warnings if plan.speed else ():
            print(f"scalerl train: --dry-run: {line}", file=sys.stderr)
    else:
        print("\n".join(describe(plan)))
    if plan.refusal:
        print(f"scalerl train: --dry-run: {plan.refusal}", file=sys.stderr)
        return 2
    return 0


def print_report(done: Trained) -> None:
    """Held-out pass@1 per task, first and last validation; error warnings; time and memory."""
    summary = done.summary
    validations = summary["validations"]
    first, last = (validations[0], validations[-1]) if validations else ({}, {})
    keys = sorted(k for k in last if k.endswith("pass@1"))
    print("\nheld-out (sampled at the training temperature):")
    for key in keys:
        before, after = first.get(key, float("nan")), last[key]
        print(f"  {key:32s} step {first.get('step', 0):>4} {before:.3f} -> "
              f"step {last['step']:>4} {after:.3f}  ({after - before:+.3f})")
    for line in error_warnings(validations):
        print(line)
    print(f"wall time {summary['wall_s']:.1f} s; peak RSS (all processes) "
          f"{summary['peak_rss_mb'] / 1024:.2f} GiB; run dir {done.run_dir}")


def error_warnings(validations: list[dict[str, float]]) -> list[str]:
    """A warning line per task whose held-out `error` share passed VAL_ERROR_WARN in any
    validation (its pass@1 then says little: those samples could not be verified)."""
    worst: dict[str, tuple[float, int]] = {}
    for row in validations:
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "error_frac" and value > worst.get(
                    parts[1], (0.0, 0))[0]:
                worst[parts[1]] = (value, int(row.get("step", 0)))
    return [f"warning: held-out {task}: {frac:.1%} of the rollouts at step {step} were verifier "
            f"errors (> {VAL_ERROR_WARN:.0%}); its pass@1 is not a measure of the policy "
            "(`scalerl doctor` checks the verifiers' needs)"
            for task, (frac, step) in sorted(worst.items()) if frac > VAL_ERROR_WARN]
