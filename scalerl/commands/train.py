"""`scalerl train`: RL-train a policy with a ScaleRL recipe (default: the tiny CPU model).

Loads and validates the config (a recipe name or YAML file plus `--set a.b=c` overrides), then
runs `scalerl.training.run_training` (model, vLLM generator, task mixture, the loop). Prints
held-out pass@1 per task before and after, the wall time and the peak resident memory of the whole
process tree. `--resume` continues the run in `--run-dir` from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from scalerl.config import ConfigError, RunConfig, load_config, recipe_names, to_dict, validate
from scalerl.models import resolve_model
from scalerl.rollout.model_files import ModelNotFoundError
from scalerl.training import PeakRSS, run_training

HELP = "train a policy with a ScaleRL recipe (no config: the tiny model on arith + synth_code)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None,
                        help=f"recipe name ({', '.join(recipe_names())}) or YAML file; "
                             "default: tiny-cpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set loss.name=grpo (repeatable)")
    parser.add_argument("--run-dir", default=None,
                        help="where metrics, TensorBoard and checkpoints go (default: "
                             "runs/<recipe>-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --run-dir from its last checkpoint")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved, validated config as YAML and exit")


def resolve_run_dir(args: argparse.Namespace) -> Path:
    if args.resume and not args.run_dir:
        raise ConfigError("--resume needs --run-dir (the run to continue)")
    if args.run_dir:
        return Path(args.run_dir)
    name = Path(args.config).stem if args.config else "tiny-cpu"
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run(args: argparse.Namespace) -> int:
    try:
        cfg = validate(load_config(args.config, args.set))
        run_dir = resolve_run_dir(args)
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.print_config:
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    return train_command(cfg, run_dir, resume=args.resume)


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the engine's processes are shut down (not orphaned)."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def train_command(cfg: RunConfig, run_dir: Path, *, resume: bool) -> int:
    from scalerl.trainer.checkpoint import latest_checkpoint

    _exit_on_sigterm()
    start = time.perf_counter()
    peak = PeakRSS()
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        print(f"scalerl train: --resume: no checkpoint under {run_dir}/checkpoints",
              file=sys.stderr)
        return 2
    if not resume and (run_dir / "metrics.jsonl").exists():
        print(f"scalerl train: {run_dir} already holds a run; pass --resume to continue it "
              "or choose another --run-dir", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(cfg, run_dir)
    try:
        model_path = str(ckpt) if ckpt else resolve_model(cfg.policy.model)
        result = run_training(cfg, run_dir, model_path, ckpt)
    except (ConfigError, ModelNotFoundError) as e:  # no such model; GPUs or launch do not fit
        print(f"scalerl train: {e}", file=sys.stderr)
        return 2
    if result is None:
        return 0
    wall = time.perf_counter() - start
    peak_mb = peak.stop()
    _report(result, run_dir, wall, peak_mb)
    return 0


def _write_config(cfg: RunConfig, run_dir: Path) -> None:
    import yaml

    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def _report(run, run_dir: Path, wall_s: float, peak_mb: float) -> None:
    first, last = (run.validations[0], run.validations[-1]) if run.validations else ({}, {})
    keys = sorted(k for k in last if k.endswith("pass@1"))
    print("\nheld-out (sampled at the training temperature):")
    for key in keys:
        before, after = first.get(key, float("nan")), last[key]
        print(f"  {key:32s} step {first.get('step', 0):>4} {before:.3f} -> "
              f"step {last['step']:>4} {after:.3f}  ({after - before:+.3f})")
    print(f"wall time {wall_s:.1f} s; peak RSS (all processes) {peak_mb / 1024:.2f} GiB; "
          f"run dir {run_dir}")
    summary = {"wall_s": wall_s, "peak_rss_mb": peak_mb, "steps": run.step,
               "validations": run.validations, "train_s": run.train_s, "loop_s": run.loop_s,
               "source": run.source.idle() if run.source is not None else {}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
