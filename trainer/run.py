"""The live state of one training run (`Run`) and the loop's view of one task (`TrainTask`).

Shapes only: `Run` holds what the loop (trainer/loop.py) builds in `setup` and mutates step by
step, and what `checkpoint`/`restore` save and load; nothing here trains, logs or generates.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalerl.envs.task import Task
from scalerl.rollout.types import Budget
from scalerl.trainer.config import TrainerConfig
from scalerl.trainer.filters import ErrorWatch, PromptRetirement
from scalerl.trainer.metrics import ComputeClock, MetricsWriter
from scalerl.trainer.stopping import StopRequest


@dataclass(frozen=True)
class TrainTask:
    """One task of the mixture as the loop sees it."""

    task: Task
    budget: Budget
    weight: float = 1.0


@dataclass
class Run:
    """The live state of one run (mutable; checkpointed by `checkpoint`)."""

    cfg: TrainerConfig
    accelerator: Any
    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    source: Any
    retirement: PromptRetirement
    clock: ComputeClock
    writer: MetricsWriter | None
    tasks: Mapping[str, TrainTask]
    run_dir: Path
    generator: Any
    errors: ErrorWatch
    step: int = 0
    train_s: float = 0.0
    loop_s: float = 0.0
    validations: list[dict[str, float]] = field(default_factory=list)
    warned_too_long: set[str] = field(default_factory=set)
    stopped: str = ""
    """Why the run stopped before `steps` (verifier failures), or "" when it did not."""
    stop: StopRequest = field(default_factory=StopRequest)
    """Set by the process's signal handlers: stop with a checkpoint (trainer/stopping.py)."""
    last_step: dict[str, Any] | None = None
    """Rank 0: the trainer state (`loop.trainer_state`) at the start of the step in progress,
    what a stop before that step's optimizer update checkpoints."""
    validator: Any = None
    """Rank 0's background validation (trainer/validation.py; `val.servers`), or None."""
    step_weights: Any = None
    """The LazyWeights of the current step's policy (what `hand_weights` handed over)."""
    val_totals: dict[int, dict[str, float]] = field(default_factory=dict)
    """The compute axis at each background validation's step, until its figures are in."""
    saved_step: int = -1
    """The step of the last checkpoint this process wrote (-1: none yet)."""
    saved_at: float = field(default_factory=time.monotonic)
    """When the last checkpoint was written (time.monotonic; the run's start before the first),
    for `checkpoint.every_s`."""
