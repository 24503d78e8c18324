"""`scalerl train`: RL-train a policy with a ScaleRL recipe (default: the tiny CPU model).

Loads and validates the config (a recipe name or YAML file plus `--set a.b=c` overrides), builds
the model, the vLLM generator and the task mixture, and runs `trainer.offpolicy.train`. Prints
held-out pass@1 per task before and after, the wall time and the peak resident memory of the whole
process tree. `--resume` continues the run in `--run-dir` from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from scalerl.config import ConfigError, RunConfig, load_config, recipe_names, to_dict, validate

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


class PeakRSS:
    """Samples the resident memory of this process and all its children in the background."""

    def __init__(self, every_s: float = 0.5):
        from scalerl.rollout.engine import process_tree_rss_mb

        self._measure = process_tree_rss_mb
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._measure()["total_mb"])
            self._stop.wait(every_s)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak_mb


def resolve_run_dir(args: argparse.Namespace) -> Path:
    if args.resume and not args.run_dir:
        raise ConfigError("--resume needs --run-dir (the run to continue)")
    if args.run_dir:
        return Path(args.run_dir)
    name = Path(args.config).stem if args.config else "tiny-cpu"
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def resolve_model(cfg: RunConfig) -> str:
    if cfg.policy.model != "tiny":
        return cfg.policy.model
    from scalerl.tiny import ensure_tiny

    return str(ensure_tiny())


def build_accelerator(dtype: str):
    import torch
    from accelerate import Accelerator

    on_gpu = torch.cuda.is_available()
    mixed = "bf16" if on_gpu and dtype == "auto" else "no"
    return Accelerator(cpu=not on_gpu, mixed_precision=mixed)


def policy_dtype(dtype: str) -> str:
    """`auto`: float32 weights (bf16 autocast on GPU comes from the Accelerator)."""
    return "float32" if dtype == "auto" else dtype


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
    model_path = str(ckpt) if ckpt else resolve_model(cfg)
    result = run_training(cfg, run_dir, model_path, ckpt)
    if result is None:
        return 0
    wall = time.perf_counter() - start
    peak_mb = peak.stop()
    _report(result, run_dir, wall, peak_mb)
    return 0


def _write_config(cfg: RunConfig, run_dir: Path) -> None:
    import yaml

    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def run_training(cfg: RunConfig, run_dir: Path, model_path: str, ckpt: Path | None = None):
    """Build model, generator and tasks; train; return the Run (None on ranks other than 0)."""
    from transformers import AutoTokenizer

    from scalerl.envs.registry import get_task
    from scalerl.rollout.engine import Generator
    from scalerl.trainer.offpolicy import TrainTask, train
    from scalerl.trainer.policy import check_head_precision, load_policy

    check_head_precision(cfg.engine.fp32_head, cfg.policy.fp32_head)
    accelerator = build_accelerator(cfg.policy.dtype)
    model = load_policy(model_path, policy_dtype(cfg.policy.dtype))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tasks = {t.name: TrainTask(get_task(t.name), t.budget(), t.weight) for t in cfg.tasks}
    generator = (Generator(model_path, config=engine_config(cfg))
                 if accelerator.is_main_process else None)
    set_cpu_threads(cfg.policy.cpu_threads)  # after the engine starts: its processes keep theirs
    try:
        run = train(cfg, model=model, tokenizer=tokenizer, generator=generator, tasks=tasks,
                    run_dir=run_dir, accelerator=accelerator, resume_from=ckpt)
    finally:
        if generator is not None:
            generator.close()
    return run if accelerator.is_main_process else None


def set_cpu_threads(threads: int | None) -> None:
    """The trainer's torch threads on CPU (`policy.cpu_threads`); GPU runs keep torch's default.

    No core pinning: keeping the trainer off the core vLLM binds its worker to was measured
    slower (PipelineRL-8 0.33 vs 0.42 steps/s on 2 cores): vLLM's scheduler process and its
    output handling need the other core, and the worker's core has gaps the trainer fills."""
    import torch

    if threads is not None and not torch.cuda.is_available():
        torch.set_num_threads(threads)


def engine_config(cfg: RunConfig):
    """The engine config, with a whole kv_cache_gib passed as an int (VLLM_CPU_KVCACHE_SPACE
    rejects "1.0")."""
    import dataclasses

    gib = cfg.engine.kv_cache_gib
    if float(gib).is_integer():
        return dataclasses.replace(cfg.engine, kv_cache_gib=int(gib))
    return cfg.engine


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
