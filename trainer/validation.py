"""Held-out validation off the training path: a generator of its own validates a step's weights
while the trainer goes on (`val.servers`).

`BackgroundValidation.submit(step, weights, evaluate)` puts step `step`'s weights on the validation
generator (its own publisher: files, as for servers) and starts the held-out evaluation in a
thread; the trainer returns to its next step at once. `finished()` hands back each completed
validation (its step, its figures, or the error that ended it), which the loop logs at the step
it belongs to. Only one validation runs at a time: a `submit` while one is running waits for it
(the wait is reported). `pending` is what a checkpoint records, so a resumed run validates again
a step whose validation was lost. The loop's side is here too: `validate_heldout` (on the
training generator, blocking, or handed to the background), `log_validations` (each result at
its own step) and `revalidate` (after a restore). Nothing here trains.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scalerl.rollout.admission import Lane
from scalerl.rollout.heldout import evaluate

if TYPE_CHECKING:
    from scalerl.trainer.run import Run

Evaluate = Callable[[Any], dict[str, float]]
"""evaluate(generator) -> the `val/...` figures of the weights the generator holds."""


@dataclass(frozen=True)
class ValResult:
    """One validation that ended: its figures, or why it failed."""

    step: int
    """The step whose weights were validated."""
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    """Why it failed (a lost server, a failed publish), or None."""
    wait_s: float = 0.0
    """How long the trainer waited at `submit` for the validation before it to end."""


class BackgroundValidation:
    """A validation generator, its publisher and at most one evaluation in flight."""

    def __init__(self, generator: Any, publisher: Any) -> None:
        self.generator, self.publisher = generator, publisher
        self._thread: threading.Thread | None = None
        self._running: int | None = None
        self._done: list[ValResult] = []
        self._lock = threading.Lock()
        self._published = 0
        """Versions published to the validation generator (its own count, not the step)."""

    @property
    def pending(self) -> list[int]:
        """Steps submitted whose results have not been handed back by `finished()`."""
        with self._lock:
            done = [r.step for r in self._done]
            running = [] if self._running is None else [self._running]
        return sorted(done + running)

    def submit(self, step: int, weights: Callable[[], Iterable] | None,
               evaluate: Evaluate) -> None:
        """Validate step `step`'s weights in the background with `evaluate`. `weights` (a
        LazyWeights) is read now, before the trainer changes them; None: the generator already
        holds them (it started from this step's weights)."""
        t = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - t
        if weights is not None:
            self._published += 1
            self.publisher.publish(weights(), self._published)
        with self._lock:
            self._running = step
        self._thread = threading.Thread(target=self._run, args=(step, waited, evaluate),
                                        daemon=True, name=f"validation-step-{step}")
        self._thread.start()

    def _run(self, step: int, waited: float, evaluate: Evaluate) -> None:
        try:
            result = ValResult(step, evaluate(self.generator), wait_s=waited)
        except Exception as exc:  # noqa: BLE001 - reported by the loop, training goes on
            result = ValResult(step, error=f"{type(exc).__name__}: {exc}", wait_s=waited)
        with self._lock:
            self._done.append(result)
            self._running = None

    def finished(self) -> list[ValResult]:
        """Validations that ended since the last call, in step order."""
        with self._lock:
            done, self._done = sorted(self._done, key=lambda r: r.step), []
        return done

    def wait(self, timeout_s: float | None = None) -> None:
        """Until the validation in flight (if any) has ended."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"validation of step {self._running} still running after "
                                   f"{timeout_s} s")
            self._thread = None

    def close(self) -> None:
        self.publisher.close()


# ---------------------------------------------------------------------------------------------
# The loop's side: a validation step, its figures, and what comes back.

def validate_heldout(run: Run) -> dict[str, float]:
    """Held-out pass@k and mean@n per task with the current weights (rank 0 generates): on the
    training generator, or handed to the background validator (its figures are logged at
    this step once they are in)."""
    v = run.cfg.val
    if v.every == 0 or run.source is None:
        return {}
    if run.validator is not None:
        run.val_totals[run.step] = run.clock.totals()
        weights = run.step_weights if run.step > 0 else None  # step 0: it holds the model
        run.validator.submit(run.step, weights, lambda gen: heldout_figures(run, gen))
        return {}
    run.source.ensure_synced()
    with run.clock.apart():  # the compute axis is training compute (validation kept apart)
        metrics = heldout_figures(run, run.generator)
    run.validations.append({"step": run.step, **metrics})
    metrics |= run.clock.totals()  # the compute axis of every row, as the paper plots
    if run.writer is not None:
        run.writer.log(run.step, metrics)  # the console prints a line per validation
    return metrics


def validation_lane(run: Run, generator) -> Lane | None:
    """The bound on validation's share of the engines (`val.engine_share`) when training
    rollouts generate beside it on the same generator (rollout/admission.py), else None."""
    shared = generator is run.generator and getattr(run.source, "streams", False)
    share = run.cfg.val.engine_share
    return Lane("validation", share) if shared and share < 1 else None


def heldout_figures(run: Run, generator) -> dict[str, float]:
    """`val/<task>/...` of the weights `generator` holds, and `val/seconds`."""
    v = run.cfg.val
    temperature = v.temperature if v.temperature is not None else run.cfg.policy.temperature
    metrics: dict[str, float] = {}
    lane = validation_lane(run, generator)
    t = time.perf_counter()
    for name, spec in run.tasks.items():
        report = evaluate(generator, [spec.task], n=v.n, budget=spec.budget, split=v.split,
                          ks=v.ks, temperature=temperature, seed=run.cfg.seed + 7919,
                          limit=v.limit, lane=lane)
        metrics |= report.tasks[name].metrics(f"val/{name}")
    metrics["val/seconds"] = time.perf_counter() - t
    return metrics


def log_validations(run: Run) -> None:
    """Rank 0: log the background validations that ended, each at the step it belongs to
    (`val/logged_at_step` says when it came in), and keep them for the run's summary."""
    if run.validator is None:
        return
    for result in run.validator.finished():
        totals = run.val_totals.pop(result.step, {})
        if result.error is not None:
            run.writer.print(f"[yellow]warning:[/] held-out validation of step {result.step} "
                             f"failed on val.servers: {result.error}; training goes on")
            run.writer.log(result.step, {"val/failed": 1.0, **totals})
            continue
        metrics = {**result.metrics, "val/wait_s": result.wait_s,
                   "val/logged_at_step": float(run.step)}
        run.validations.append({"step": result.step, **metrics})
        run.writer.log(result.step, metrics | totals)


def revalidate(run: Run, pending: list[int]) -> None:
    """After a restore: validations that were in flight when the checkpoint was written run
    again when they were of its own step (the weights just loaded), else are reported lost."""
    if run.validator is None:
        return
    for step in pending:
        if step == run.step:
            run.val_totals[step] = run.clock.totals()
            run.validator.submit(step, run.step_weights, lambda gen: heldout_figures(run, gen))
        else:
            run.writer.print(f"[yellow]warning:[/] the held-out validation of step {step} was "
                             f"in flight when the checkpoint of step {run.step} was written; "
                             "its weights are gone, so it is not logged")
