"""When a run stops early with a checkpoint: a signal asked (preemption), or a checkpoint is due
by the clock.

`StopRequest` is what a process's SIGTERM/SIGUSR1 handlers set. The loop (trainer/loop.py) does
not wait for the step's end (minutes at the recipe's scale, more than a launcher's grace period):
PipelineRL's wait for a batch and every micro-batch boundary read it (`StepAbandoned`: the step in
progress is dropped before its optimizer update, and the last completed step is checkpointed,
exactly as it was), and a step boundary reads it too (`Preempted`: that step is checkpointed).
Either way the run stops (`RunStopped`, exit 75 at the command line; `--resume` continues at the
next step). A second SIGTERM while the first is pending, or a SIGTERM before the loop runs, exits
at once (143), as an unhandled SIGTERM would. `Boundary` is the decision
made at one step boundary by rank 0 and broadcast, so every rank stops (or checkpoints) together.
`write_stop_record` leaves `stopped.json` in the run directory: torchrun reports any non-zero exit
of a worker as its own exit 1, so a retry wrapper reads the file instead. Installing handlers is the
command line's (scalerl/commands/train.py); nothing here trains.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
"""Signals that ask for a checkpoint and a stop (SLURM sends SIGUSR1 ahead of a time limit with
`--signal=USR1@<seconds>`; schedulers preempt with SIGTERM; torchrun forwards SIGTERM, and SIGUSR1
only when it is named in `--signals-to-handle`: docs/commands/train.md)."""
STOP_RECORD = "stopped.json"
"""The run directory's record of the last early stop (removed when a run starts again)."""
STOPPED = 75
"""Exit code of a run stopped with a checkpoint, resumable (EX_TEMPFAIL: retry later)."""
TERMINATED = 143
"""Exit code of a second SIGTERM (128 + 15, what an unhandled SIGTERM gives)."""


class Preempted(Exception):
    """A stop was asked (a signal's name): raised at a step boundary, after its checkpoint."""


class StepAbandoned(Exception):
    """A stop was asked during a step, before its optimizer update (every rank raises it at the
    same point): the step's work is dropped and the last completed step is checkpointed."""


class StopRequest:
    """Set by signal handlers; read by the loop between micro-batches and at step boundaries."""

    def __init__(self) -> None:
        self.reason: str | None = None
        """Why a stop was asked (e.g. `SIGTERM`), or None."""
        self.armed = False
        """True once the loop runs (it checkpoints at step boundaries); before that (start-up:
        loading, the engine starting) SIGTERM exits at once, as it would unhandled."""

    def arm(self) -> None:
        """The loop is running: from now on a signal asks for a checkpoint and a stop."""
        self.armed = True

    def ask(self, reason: str) -> None:
        """Ask for a stop (the first reason given is kept)."""
        if self.reason is None:
            self.reason = reason

    def handle(self, signum: int, frame: Any = None) -> None:
        """Signal handler: the first signal asks for a stop; a second SIGTERM exits now."""
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and (self.reason is not None or not self.armed):
            raise SystemExit(TERMINATED)  # unwinds like Ctrl-C: the engine is shut down
        self.ask(name)
        print(f"scalerl train: {name}: the run stops at the next micro-batch or step boundary "
              "with a checkpoint of the last completed step (send SIGTERM again to stop at once, "
              "without it)", file=sys.stderr)

    def install(self) -> None:
        """Handle STOP_SIGNALS in this process (the main thread's)."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.handle)


@dataclass(frozen=True)
class Boundary:
    """What one step boundary decided (rank 0's view, broadcast to every rank)."""

    stop: str | None = None
    """Why the run stops here with a checkpoint (a signal's name), or None."""
    save: bool = False
    """A checkpoint is due by the clock (`checkpoint.every_s`)."""


def clock_due(last_save: float, every_s: float, now: float | None = None) -> bool:
    """Whether `every_s` seconds (0: never) have passed since `last_save` (time.monotonic)."""
    now = time.monotonic() if now is None else now
    return every_s > 0 and now - last_save >= every_s


def write_stop_record(run_dir: Path, *, step: int, reason: str, exit_code: int) -> Path:
    """`stopped.json`: the step checkpointed, why, the exit code and the command's advice."""
    path = Path(run_dir) / STOP_RECORD
    record = {"step": step, "reason": reason, "exit_code": exit_code, "resumable": True,
              "time": time.time(), "resume": f"scalerl train --run-dir {run_dir} --resume"}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def clear_stop_record(run_dir: Path) -> None:
    """A run that starts (or resumes) removes the record of an earlier stop."""
    (Path(run_dir) / STOP_RECORD).unlink(missing_ok=True)
