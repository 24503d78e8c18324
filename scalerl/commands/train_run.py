"""One training run, from a resolved config to summary.json, for `scalerl train` and
`scalerl.api.train`.

`train_command` checks the run directory (a checkpoint to resume, no run to write over), writes
config.yaml (and resumes.jsonl for a resume that changed settings), handles the stop signals
while `scalerl.training.run_training` trains, and writes summary.json. Its failures are
CommandError with the line and exit status `scalerl train` reports. Nothing here reads flags or
prints results (scalerl/commands/train.py does).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.coerce import ConfigError
from scalerl.commands import CommandError
from scalerl.config import RunConfig, to_dict
from scalerl.trainer.stopping import STOPPED


@dataclass(frozen=True)
class Trained:
    """A run that ended: its directory, config and what summary.json holds."""

    run_dir: Path
    config: RunConfig
    summary: dict[str, Any]
    """summary.json: wall_s, peak_rss_mb, steps, validations, train_s, loop_s, stopped, source."""




def train_command(cfg: RunConfig, run_dir: Path, *, resume: bool, changes: dict | None = None,
                  verbose: bool = False, recipe: str | None = None) -> Trained | None:
    """Train `cfg` into `run_dir` and write summary.json; CommandError (2: no checkpoint to
    resume, a run already there, no such model; 75: generation unavailable). None on ranks
    other than 0."""
    from scalerl.ending import close_pools
    from scalerl.training import PeakRSS

    start = time.perf_counter()
    peak = PeakRSS()
    ckpt = _checkpoint_to_start(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    if rank0():
        from scalerl.trainer.stopping import clear_stop_record

        clear_stop_record(run_dir)
    if (not resume or changes) and rank0():
        _write_config(cfg, run_dir, ckpt, changes or {})
    result = _train(cfg, run_dir, ckpt, verbose=verbose, recipe=recipe)
    if result is None:
        return None
    close_pools()
    return Trained(run_dir, cfg, write_summary(result, run_dir, time.perf_counter() - start,
                                               peak.stop()))


def _checkpoint_to_start(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint a resume starts from (None for a new run); CommandError when a resume
    has none or a new run would write over another."""
    from scalerl.trainer.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise CommandError(f"scalerl train: --resume: no checkpoint under {run_dir}/checkpoints")
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise CommandError(f"scalerl train: {run_dir} already holds a run; pass --resume to "
                           "continue it or choose another --run-dir")
    return ckpt


def _train(cfg: RunConfig, run_dir: Path, ckpt: Path | None, *, verbose: bool,
           recipe: str | None):
    """`run_training` with the stop signals handled and its failures as CommandError."""
    from scalerl.ending import close_pools
    from scalerl.engine_log import ENGINE_LOG, hide_progress_bars, tracker_into
    from scalerl.models import resolve_model
    from scalerl.rollout.base_generator import GeneratorUnavailable
    from scalerl.rollout.model_files import ModelNotFoundError
    from scalerl.trainer.loop import RunStopped
    from scalerl.trainer.stopping import write_stop_record
    from scalerl.training import run_training

    log = None if verbose else run_dir / ENGINE_LOG
    if log is not None:
        hide_progress_bars()
        tracker_into(log)
    try:
        with _stop_signals() as stop:
            # a LoRA checkpoint holds its adapter alone: the base is the run's model
            model_path = (str(ckpt) if ckpt and not cfg.policy.lora.enabled
                          else resolve_model(cfg.policy.model))
            return run_training(cfg, run_dir, model_path, ckpt, engine_log=log, recipe=recipe,
                                stop=stop)
    except (ConfigError, ModelNotFoundError) as e:  # no such model; GPUs or launch do not fit
        close_pools()
        raise CommandError(f"scalerl train: {e}") from None
    except (RunStopped, GeneratorUnavailable) as exc:  # no generation for now: try again later
        close_pools()
        if isinstance(exc, RunStopped) and rank0():  # torchrun turns exit 75 into its own 1
            write_stop_record(run_dir, step=exc.step, reason=str(exc), exit_code=STOPPED)
        raise CommandError(f"scalerl train: {exc}", STOPPED) from None


@contextmanager
def _stop_signals() -> Iterator[Any]:
    """A StopRequest its signals set (SIGTERM/SIGUSR1: stop mid-step with a checkpoint of the
    last completed step, exit 75) while the run lasts; the process's own handlers are put back
    after it. Off the main thread (a library caller's thread) no handler can be set: the run has
    none."""
    import signal

    from scalerl.trainer.stopping import STOP_SIGNALS, StopRequest

    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    stop.install()
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def rank0() -> bool:
    """This process is rank 0 of a launch (torchrun / accelerate launch set RANK), or alone."""
    return int(os.environ.get("RANK", "0")) == 0


def _write_config(cfg: RunConfig, run_dir: Path, ckpt: Path | None, changes: dict) -> None:
    """config.yaml; a resume that changed settings says so and appends them to resumes.jsonl."""
    import yaml

    if changes:
        shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
        print(f"scalerl train: resuming {run_dir} from {ckpt.name} with {shown}",
              file=sys.stderr)
        row = {"time": time.time(), "checkpoint": ckpt.name,
               "changes": {k: [old, new] for k, (old, new) in changes.items()}}
        with (run_dir / "resumes.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def write_summary(run, run_dir: Path, wall_s: float, peak_mb: float) -> dict[str, Any]:
    """summary.json of a finished `run` (the trainer's Run), and its content."""
    summary = {"wall_s": wall_s, "peak_rss_mb": peak_mb, "steps": run.step,
               "validations": run.validations, "train_s": run.train_s, "loop_s": run.loop_s,
               "stopped": run.stopped,
               "source": run.source.idle() if run.source is not None else {}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
