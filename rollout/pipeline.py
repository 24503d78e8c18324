"""The PipelineRL-k generator driver: keeps the Generator streaming while the trainer steps.

A background thread draws prompts from a sampler, submits n rollouts per prompt to the Generator
(which scores each completion as it finishes), and files completed groups into a `GroupBuffer`.
Admission is paced by the lag bound (no prompt starts if it would be trained more than `max_lag`
versions later), so nothing is discarded, and, when `offpolicy.max_in_flight` is set, by the
rollouts not yet finished (each frees its place as it finishes: `in_flight_prompts`). Each
prompt's rollouts are sent with its admission number as their priority (older prompts, and
continuations after a forced interruption, are scheduled first: rollout/base_generator.py), so
batch 0 is not stuck behind the lag window's newer prompts however many wait. By default the
whole lag window is in flight: a cap near the engines' concurrency starved the engine here
(`scalerl bench pipeline`: x0.94 at 2x max_num_seqs, x1.05 at 4x, x1.92 with the window;
docs/measurements.md). The trainer waits for a
batch as long as generation makes progress (`stall_s`), or at most `batch_wait_s`; either expiry
raises `BatchWaitExpired`, a `GeneratorUnavailable`, which a training run turns into a checkpoint
and a stop. Weights arrive through `trainer/publish.py`, which updates the Generator in flight;
this module only reads `generator.version` and `generator.progress()`. It does not train.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from scalerl.envs.base import Sample
from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.rollout.buffer import (
    Batch,
    BufferClosed,
    BufferTimeout,
    GroupBuffer,
    PromptGroup,
    lag_metrics,
)
from scalerl.rollout.types import Budget, Rollout

PROGRESS_EVERY_S = 1.0
"""How often the driver reads the generator's progress (for the stall limit)."""


class BatchWaitExpired(GeneratorUnavailable):
    """The trainer waited past `batch_wait_s`, or generation made no progress for `stall_s`:
    a training run checkpoints (finished groups kept, the rest regenerated on `--resume`) and
    stops."""


def in_flight_prompts(*, n: int, groups_per_batch: int, max_lag: int,
                      rollouts: int | None = None) -> int:
    """The in-flight cap in prompts: `rollouts` (offpolicy.max_in_flight) in whole prompts of
    `n`, never fewer than one batch (so batch 0 can complete), never more than the lag window
    (`groups_per_batch` x (`max_lag` + 1), the most admission allows, and the default)."""
    window = groups_per_batch * (max_lag + 1)
    if rollouts is None:
        return window
    return min(window, max(groups_per_batch, math.ceil(rollouts / n)))


class GeneratorLike(Protocol):
    """What the pipeline needs of `rollout.engine.EngineGenerator`."""

    @property
    def version(self) -> int: ...

    def generate(self, samples: list[Sample], *, n: int, budget: Budget, temperature: float,
                 seed: int | None, priority: int = 0) -> list[Rollout]: ...


Sampler = Callable[[], Sample]
"""Returns the next training prompt; raises StopIteration when there are no more. May expose
`state_dict()`/`load_state_dict()`, saved atomically with the buffer."""


class PipelineRL:
    """Drive `generator` continuously; hand the trainer ordered, lag-bounded batches.

    The seed passed with prompt `seq` is `seed_fn(seq)`, by default `seed + seq // B` (the batch
    index: what a synchronous loop passing `seed + step` uses; the engine derives each rollout's
    seed from it, the sample id and the group index), so regenerating a prompt after a resume
    reuses its seed. `max_in_flight`: the cap in prompts' worth of unfinished rollouts
    (default: the lag window). `batch_wait_s`: most seconds `take_batch` waits
    (None: no limit); `stall_s`: most seconds it waits while no group completes and the
    generator's `progress()` does not move (None: no limit).
    """

    def __init__(self, generator: GeneratorLike, sampler: Sampler, *, n: int,
                 groups_per_batch: int, max_lag: int, budget: Budget | Mapping[str, Budget],
                 temperature: float = 1.0,
                 seed: int = 0, max_in_flight: int | None = None,
                 trainer_version: int = 0, poll_s: float = 0.05,
                 seed_fn: Callable[[int], int] | None = None,
                 batch_wait_s: float | None = None, stall_s: float | None = None):
        if n <= 0:
            raise ValueError(f"n (rollouts per prompt) must be > 0, got {n}")
        self.generator, self.sampler = generator, sampler
        self.n, self.budget, self.temperature, self.seed = n, budget, temperature, seed
        self.buffer = GroupBuffer(groups_per_batch, max_lag, trainer_version=trainer_version)
        self.max_in_flight = max_in_flight or in_flight_prompts(
            n=n, groups_per_batch=groups_per_batch, max_lag=max_lag)
        if self.max_in_flight <= 0:
            raise ValueError(f"max_in_flight must be > 0, got {self.max_in_flight}")
        for name, value in (("batch_wait_s", batch_wait_s), ("stall_s", stall_s)):
            if value is not None and value <= 0:
                raise ValueError(f"PipelineRL {name} must be > 0 or None (no limit), got {value}")
        self.batch_wait_s, self.stall_s = batch_wait_s, stall_s
        self._progress = _Progress(getattr(generator, "progress", None))
        self.poll_s = poll_s
        self.seed_fn = seed_fn or (lambda seq: seed + seq // groups_per_batch)
        self._admit_lock = threading.Lock()  # sampler draw + admit vs state_dict
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._exhausted: BaseException | None = None
        self._clock = _IdleClock()
        self._unfinished = _Counter()
        """Rollouts admitted and not yet finished: what the in-flight cap counts."""
        self._trainer_wait_s = 0.0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> PipelineRL:
        if self._thread is not None:
            raise RuntimeError("PipelineRL.start: already started")
        self._clock.start()
        self._progress.observe(0, 0)  # the stall clock starts now
        self._thread = threading.Thread(target=self._run, name="pipelinerl-driver", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0, drain_s: float = 30.0) -> None:
        """Stop admitting and stop the driver thread; wait up to `drain_s` for prompts still
        generating (so closing the engine right after does not kill live requests), then
        abandon the rest (daemon threads; a checkpoint has them as in flight)."""
        self._stop.set()
        self.buffer.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"PipelineRL.stop: driver still running after {timeout_s}s")
        deadline = time.monotonic() + drain_s
        while self._clock.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.buffer.close(self._error)

    def __enter__(self) -> PipelineRL:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- driver ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self._error is None:
                self._admit()
                for seq, sample in self.buffer.claim_queued():
                    self._submit(seq, sample)
                self._progress.observe(self.buffer.completed_total, self._clock.in_flight)
                self.buffer.wait(self.poll_s)
        except BaseException as e:  # noqa: BLE001 - recorded, closes the buffer, re-raised there
            self._fail(e)

    def _admit(self) -> None:
        with self._admit_lock:
            while (self._exhausted is None and self._unfinished.value + self._queued() * self.n
                   < self.max_in_flight * self.n
                   and self.buffer.admissible(self.generator.version)):
                try:
                    sample = self.sampler()
                except Exception as e:  # StopIteration, or the sampler's own error (loud later)
                    self._exhausted = e
                    self.buffer.end_admission(e)
                    return
                self.buffer.admit(sample)

    def _queued(self) -> int:
        return self.buffer.counts()["queued"]

    def _submit(self, seq: int, sample: Sample) -> None:
        """One daemon thread per prompt (blocking in `generator.generate`; the engine runs them
        all concurrently). Daemon, so a stopped pipeline never holds the process open."""
        self._clock.begin()
        self._unfinished.add(self.n)
        threading.Thread(target=self._generate, args=(seq, sample), daemon=True,
                         name=f"pipelinerl-gen-{seq}").start()

    def _generate(self, seq: int, sample: Sample) -> None:
        left = [self.n]  # this prompt's rollouts not yet finished
        try:
            self._generate_group(seq, sample, left)
        except BaseException as e:  # noqa: BLE001 - recorded, fails the trainer's take_batch
            self._fail(e)
        finally:
            self._unfinished.add(-left[0])
            self._clock.end()
            self.buffer.notify()

    def _generate_group(self, seq: int, sample: Sample, left: list[int]) -> None:
        """The prompt's n rollouts; with a streaming generator each frees its place in the
        in-flight cap as it finishes (a prompt's longest rollout does not hold its n places)."""
        if self._stop.is_set():
            return
        kwargs = dict(n=self.n, budget=self.budget_for(sample), temperature=self.temperature,
                      seed=self.seed_fn(seq), priority=seq)  # older prompts first
        stream = getattr(self.generator, "stream", None)
        if stream is None:
            rollouts = self.generator.generate([sample], **kwargs)
        else:
            rollouts = []
            for rollout in stream([sample], **kwargs):
                rollouts.append(rollout)
                left[0] -= 1
                self._unfinished.add(-1)
                self.buffer.notify()
            rollouts.sort(key=lambda r: r.group)
        if len(rollouts) != self.n:
            raise RuntimeError(f"generator returned {len(rollouts)} rollouts for sample "
                               f"{sample.id!r} (seq {seq}), expected n={self.n}")
        self.buffer.put(PromptGroup(seq, sample, tuple(rollouts)))

    def budget_for(self, sample: Sample) -> Budget:
        if isinstance(self.budget, Budget):
            return self.budget
        if sample.task not in self.budget:
            raise KeyError(f"no length budget for task {sample.task!r} (sample {sample.id!r}); "
                           f"budgets are set for: {', '.join(sorted(self.budget))}")
        return self.budget[sample.task]

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self.buffer.close(error)

    # -- trainer side ---------------------------------------------------------------------
    def take_batch(self, trainer_version: int, timeout_s: float | None = None,
                   interrupt: Callable[[], None] | None = None) -> Batch:
        """The next B groups, lag <= max_lag (see `GroupBuffer.take_batch`). Raises the
        pipeline's own error (chained) if generation failed (GeneratorUnavailable as itself),
        BatchWaitExpired after `timeout_s` (default `batch_wait_s`) or once nothing progressed
        for `stall_s`. `interrupt` is called about once a second while waiting and may raise
        to end the wait with no batch taken (a stop asked)."""
        if self._thread is None:
            raise RuntimeError("PipelineRL.take_batch: call start() first")
        timeout_s = self.batch_wait_s if timeout_s is None else timeout_s
        try:
            batch = self.buffer.take_batch(trainer_version, timeout_s,
                                           check=self._checks(interrupt))
        except BufferTimeout as e:
            raise BatchWaitExpired(f"PipelineRL: {e} (the wait limit, offpolicy.batch_wait_s, "
                                   f"is {timeout_s:g} s)") from e
        except BufferClosed as e:
            if isinstance(self._error, GeneratorUnavailable):  # the caller may stop and resume
                raise GeneratorUnavailable(str(self._error)) from self._error
            if self._error is not None:
                raise RuntimeError(f"PipelineRL generation failed: {self._error!r}") \
                    from self._error
            if isinstance(self._exhausted, StopIteration):
                raise StopIteration(f"PipelineRL: the sampler is exhausted ({e})") from e
            raise
        self._trainer_wait_s += batch.wait_s
        return batch

    def _checks(self, interrupt: Callable[[], None] | None) -> Callable[[str], None]:
        if interrupt is None:
            return self._check_stall

        def check(missing: str) -> None:
            interrupt()
            self._check_stall(missing)
        return check

    def _check_stall(self, missing: str) -> None:
        """Raise BatchWaitExpired once neither a group completed nor the generator's progress
        moved for `stall_s` while prompts were in flight."""
        quiet = self._progress.quiet_s()
        if self.stall_s is not None and quiet > self.stall_s:
            raise BatchWaitExpired(
                f"PipelineRL: no group completed and no token was generated for {quiet:.0f} s "
                f"(the stall limit, offpolicy.stall_s, is {self.stall_s:g} s); {missing}")

    def metrics(self, batch: Batch | None = None) -> dict[str, float]:
        """Lag of `batch`'s rollouts, idle seconds and shares since start, buffer occupancy."""
        wall = max(self._clock.elapsed(), 1e-9)
        gen_idle = self._clock.idle_s()
        counts = self.buffer.counts()
        out = {"async/wall_s": wall, "async/generator_idle_s": gen_idle,
               "async/generator_idle_frac": gen_idle / wall,
               "async/trainer_wait_s": self._trainer_wait_s,
               "async/trainer_idle_frac": self._trainer_wait_s / wall,
               "async/in_flight": float(self._clock.in_flight),
               "async/buffered_groups": float(counts["done"]),
               "async/regenerated_total": float(self.buffer.regenerated_total)}
        if batch is not None:
            out.update(lag_metrics(batch.lags))
            out["async/batch_wait_s"] = batch.wait_s
            out["async/batch_index"] = float(batch.index)  # continuous across a resume
            out["async/regenerated"] = float(batch.regenerated)
        return out

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Buffer (completed groups, in-flight prompts) and sampler position, taken together so
        that every prompt drawn from the sampler is in the buffer's state."""
        return self.snapshot()()

    def snapshot(self) -> Callable[[], dict[str, Any]]:
        """`state_dict` as of now, serialised when called (`GroupBuffer.snapshot`)."""
        with self._admit_lock:
            sampler_state = getattr(self.sampler, "state_dict", None)
            buffer, sampler = self.buffer.snapshot(), sampler_state() if sampler_state else None
        return lambda: {"buffer": buffer(), "sampler": sampler}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore before `start()`: in-flight prompts are regenerated first, then new ones."""
        if self._thread is not None:
            raise RuntimeError("PipelineRL.load_state_dict: call before start()")
        self.buffer.load_state_dict(state["buffer"])
        if state.get("sampler") is not None:
            loader = getattr(self.sampler, "load_state_dict", None)
            if loader is None:
                raise TypeError("checkpoint has a sampler state but this sampler has no "
                                "load_state_dict()")
            loader(state["sampler"])


class _Progress:
    """When generation last moved: a group completed, the generator's `progress()` changed, or
    nothing was in flight (nothing to wait for). Read by the driver every PROGRESS_EVERY_S."""

    def __init__(self, read: Callable[[], int] | None) -> None:
        self._read = read
        self._last: tuple[int, int | None] | None = None
        self._read_at = 0.0
        self._moved_at = time.monotonic()

    def observe(self, completed: int, in_flight: int) -> None:
        now = time.monotonic()
        if not in_flight:  # nothing to wait for
            self._moved_at = now
            return
        if now - self._read_at < PROGRESS_EVERY_S:
            return
        self._read_at = now
        seen = (completed, self._read() if self._read is not None else None)
        if seen != self._last:
            self._last, self._moved_at = seen, now

    def quiet_s(self) -> float:
        return time.monotonic() - self._moved_at


class _Counter:
    """A thread-safe count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, k: int) -> None:
        with self._lock:
            self.value += k


class _IdleClock:
    """Counts running prompts; accumulates wall time during which none is running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self._t0 = self._idle_since = time.monotonic()
        self._idle = 0.0

    def start(self) -> None:
        with self._lock:
            self._t0 = self._idle_since = time.monotonic()
            self._idle = 0.0

    def begin(self) -> None:
        with self._lock:
            if self.in_flight == 0:
                self._idle += time.monotonic() - self._idle_since
            self.in_flight += 1

    def end(self) -> None:
        with self._lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle_since = time.monotonic()

    def idle_s(self) -> float:
        with self._lock:
            extra = time.monotonic() - self._idle_since if self.in_flight == 0 else 0.0
            return self._idle + extra

    def elapsed(self) -> float:
        return time.monotonic() - self._t0
