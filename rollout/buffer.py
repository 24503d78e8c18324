"""A bounded, ordered buffer of prompt groups with policy-version bookkeeping for PipelineRL-k.

Every admitted prompt gets a sequence number; batch b is the prompts b*B .. b*B+B-1, taken in
that order once all are complete. Lag of a rollout = trainer version at the step that trains on
it minus the rollout's `min_version` (0 = on-policy); `take_batch` never returns more than
`max_lag`. This module does not generate, score or train; `rollout/pipeline.py` drives it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scalerl.envs.base import Sample, Score
from scalerl.envs.environment import Turn
from scalerl.rollout.types import Rollout


class BufferTimeout(TimeoutError):
    """`take_batch` (or admission) waited longer than its timeout."""


class BufferClosed(RuntimeError):
    """The buffer was closed (the pipeline stopped or failed) while someone waited on it."""


@dataclass(frozen=True)
class PromptGroup:
    """All n rollouts of one admitted prompt."""

    seq: int
    """Admission sequence number: position of the prompt in the run's prompt stream."""
    sample: Sample
    rollouts: tuple[Rollout, ...]

    @property
    def min_version(self) -> int | None:
        """The oldest policy version that sampled a token of the group; None when no rollout
        has one (a prompt too long to generate, an episode that failed before its first
        token): no policy made such a group, so it has no lag and is never stale (generating it
        again gives the same)."""
        versions = [r.min_version for r in self.rollouts if r.versions]
        return min(versions) if versions else None


@dataclass(frozen=True)
class Batch:
    """The groups one trainer step trains on, with the lag bookkeeping of that step."""

    index: int
    """Batch number b (0-based over the run): it holds prompts b*B .. b*B+B-1."""
    trainer_version: int
    groups: tuple[PromptGroup, ...]
    wait_s: float
    """Seconds the trainer waited in `take_batch` for this batch."""
    regenerated: int = 0
    """Groups found too stale at take time and sent back for regeneration."""
    lags: tuple[int, ...] = field(default=())
    """Lag of every rollout with tokens: trainer_version - rollout.min_version."""

    @property
    def rollouts(self) -> list[Rollout]:
        return [r for g in self.groups for r in g.rollouts]


def rollout_lag(trainer_version: int, rollout: Rollout) -> int | None:
    """Versions between the weights that will train on `rollout` and its oldest token (None
    for a rollout without tokens: no policy sampled it).

    0 means every token was sampled by the very weights now being updated (on-policy).
    PPO-offpolicy-1 always has lag 0; PPO-offpolicy-k has lags 0..k-1.
    """
    return trainer_version - rollout.min_version if rollout.versions else None


def lag_metrics(lags: Sequence[int]) -> dict[str, float]:
    """`async/lag_min|mean|max` over the rollouts of one batch."""
    if not lags:
        return {}
    return {"async/lag_min": float(min(lags)), "async/lag_mean": sum(lags) / len(lags),
            "async/lag_max": float(max(lags))}


def rollout_to_dict(r: Rollout) -> dict[str, Any]:
    d = asdict(r)
    d["score"] = r.score.to_dict()
    return d


def rollout_from_dict(d: dict[str, Any]) -> Rollout:
    tuples = ("prompt_token_ids", "token_ids", "logprobs", "versions", "tool_calls")
    kw = {k: (tuple(v) if k in tuples else v) for k, v in d.items()}
    kw["score"] = Score(**d["score"])
    kw["turns"] = tuple(Turn(**t) for t in d.get("turns") or ())
    return Rollout(**kw)


@dataclass
class _Slot:
    sample: Sample
    state: str = "queued"  # queued -> running -> done; done -> queued when too stale
    group: PromptGroup | None = None


class GroupBuffer:
    """Ordered slots for admitted prompts; thread-safe; bounded by the lag window.

    Admission (generator side): prompt seq p belongs to batch b = p // B, predicted to be trained
    at trainer version V(b) = last take's version + (b - last taken batch), i.e. one published
    version per batch. It is admitted only when V(b) - generator_version <= max_lag, so its tokens
    (all sampled at >= that version) have lag <= max_lag. At most (max_lag + 1) * B prompts are
    admitted ahead of the trainer. `take_batch` checks the real lag again and sends any group
    that is too stale anyway (a trainer that stepped more than once per batch, a resume with a
    smaller max_lag) back for regeneration instead of returning it.
    """

    def __init__(self, groups_per_batch: int, max_lag: int, *, trainer_version: int = 0):
        if groups_per_batch <= 0:
            raise ValueError(f"groups_per_batch must be > 0, got {groups_per_batch}")
        if max_lag < 0:
            raise ValueError(f"max_lag must be >= 0 (0 = synchronous), got {max_lag}")
        self.groups_per_batch = groups_per_batch
        self.max_lag = max_lag
        self._cond = threading.Condition()
        self._slots: dict[int, _Slot] = {}
        self._next_seq = 0
        self._batches_taken = 0
        self._next_version = trainer_version
        """Predicted trainer version of the next batch to take."""
        self._closed: BaseException | None = None
        self._admission_ended: BaseException | None = None
        self.regenerated_total = 0
        self.completed_total = 0
        """Groups put so far (a progress signal for the pipeline's stall limit)."""

    # -- generator side -------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        return self._next_seq

    def predicted_version(self, seq: int) -> int:
        """Trainer version at which the batch holding prompt `seq` is predicted to be trained."""
        return self._next_version + (seq // self.groups_per_batch - self._batches_taken)

    def admissible(self, generator_version: int) -> bool:
        """May a new prompt start now, with weights of `generator_version`?"""
        with self._cond:
            return self.predicted_version(self._next_seq) - generator_version <= self.max_lag

    def admit(self, sample: Sample) -> int:
        """Record a new prompt (call only when `admissible`); returns its sequence number."""
        with self._cond:
            seq = self._next_seq
            self._slots[seq] = _Slot(sample)
            self._next_seq += 1
            self._cond.notify_all()
            return seq

    def claim_queued(self) -> list[tuple[int, Sample]]:
        """Queued prompts (new, resumed or sent back as stale), now marked running, in order."""
        with self._cond:
            out = [(s, slot.sample) for s, slot in sorted(self._slots.items())
                   if slot.state == "queued"]
            for s, _ in out:
                self._slots[s].state = "running"
            return out

    def put(self, group: PromptGroup) -> None:
        """Store the completed group of an admitted, running prompt."""
        with self._cond:
            slot = self._slots.get(group.seq)
            if slot is None or slot.state != "running":
                state = "absent" if slot is None else slot.state
                raise KeyError(f"put: prompt seq {group.seq} is {state}, expected running")
            if group.sample.id != slot.sample.id:
                raise ValueError(f"put: seq {group.seq} holds sample {slot.sample.id!r}, "
                                 f"got a group for {group.sample.id!r}")
            slot.state, slot.group = "done", group
            self.completed_total += 1
            self._cond.notify_all()

    # -- trainer side ---------------------------------------------------------------------
    def take_batch(self, trainer_version: int, timeout_s: float | None,
                   check: Callable[[str], None] | None = None) -> Batch:
        """Wait for the next B prompts to be complete and no more than max_lag stale; take them.

        Raises BufferTimeout after `timeout_s` (None: no limit; the message names what is
        missing) and BufferClosed if the pipeline stopped or failed meanwhile. `check` is called
        about once a second while waiting, with what is missing, and may raise to end the wait.
        """
        start = time.monotonic()
        deadline = start + (timeout_s if timeout_s is not None else float("inf"))
        b = self._batches_taken
        seqs = range(b * self.groups_per_batch, (b + 1) * self.groups_per_batch)
        regenerated = 0
        with self._cond:
            self._next_version = trainer_version  # this batch is trained at trainer_version
            self._cond.notify_all()
            while True:
                if self._closed is not None:
                    raise BufferClosed(f"buffer closed while waiting for batch {b}") \
                        from self._closed
                if self._admission_ended is not None and seqs.stop > self._next_seq:
                    raise BufferClosed(f"batch {b} can never be complete: no prompt after "
                                       f"{self._next_seq - 1} will be admitted "
                                       f"({self._admission_ended!r})") from self._admission_ended
                regenerated += self._send_back_stale(seqs, trainer_version)
                if all(s in self._slots and self._slots[s].state == "done" for s in seqs):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BufferTimeout(self._missing_message(b, seqs, time.monotonic() - start))
                if check is not None:
                    check(self._missing_message(b, seqs, time.monotonic() - start))
                self._cond.wait(min(left, 1.0))
            groups = tuple(self._slots.pop(s).group for s in seqs)  # type: ignore[misc]
            self._batches_taken += 1
            self._next_version = trainer_version + 1
            self._cond.notify_all()
        lags = tuple(lag for g in groups for r in g.rollouts
                     if (lag := rollout_lag(trainer_version, r)) is not None)
        return Batch(index=b, trainer_version=trainer_version, groups=groups,
                     wait_s=time.monotonic() - start, regenerated=regenerated, lags=lags)

    def _send_back_stale(self, seqs: range, trainer_version: int) -> int:
        n = 0
        for s in seqs:
            slot = self._slots.get(s)
            if slot is None or slot.state != "done":
                continue
            oldest = slot.group.min_version
            if oldest is not None and trainer_version - oldest > self.max_lag:
                slot.state, slot.group = "queued", None
                n += 1
        if n:
            self.regenerated_total += n
            self._cond.notify_all()
        return n

    def _missing_message(self, b: int, seqs: range, waited_s: float) -> str:
        states = {s: (self._slots[s].state if s in self._slots else "not admitted") for s in seqs}
        missing = {s: st for s, st in states.items() if st != "done"}
        return (f"take_batch: batch {b} (prompts {seqs.start}..{seqs.stop - 1}) not complete "
                f"after {waited_s:.1f}s; waiting on {missing}")

    # -- lifecycle ------------------------------------------------------------------------
    def close(self, error: BaseException | None = None) -> None:
        """Wake every waiter with BufferClosed (chained to `error` when the pipeline failed)."""
        with self._cond:
            self._closed = error or RuntimeError("buffer closed")
            self._cond.notify_all()

    def end_admission(self, reason: BaseException) -> None:
        """No more prompts will be admitted (the sampler is exhausted or failed): a trainer
        waiting for a batch that needs one gets BufferClosed chained to `reason`."""
        with self._cond:
            self._admission_ended = reason
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> None:
        """Sleep until the buffer changes (or `timeout_s`); used by the pipeline's driver."""
        with self._cond:
            self._cond.wait(timeout_s)

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def counts(self) -> dict[str, int]:
        with self._cond:
            states = [slot.state for slot in self._slots.values()]
        return {st: states.count(st) for st in ("queued", "running", "done")}

    @property
    def batches_taken(self) -> int:
        return self._batches_taken

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Completed-but-untrained groups with their rollouts, and every other admitted prompt
        (queued or in flight) to regenerate on resume. JSON-able."""
        return self.snapshot()()

    def snapshot(self) -> Callable[[], dict[str, Any]]:
        """`state_dict` as of now, built when called: the slots are copied now by reference
        (groups are frozen), the rollouts serialised later (seconds at a real batch's size)."""
        with self._cond:
            slots = [(s, slot.sample, slot.group if slot.state == "done" else None)
                     for s, slot in sorted(self._slots.items())]
            head = {"groups_per_batch": self.groups_per_batch, "max_lag": self.max_lag,
                    "next_seq": self._next_seq, "batches_taken": self._batches_taken,
                    "next_version": self._next_version}
        return lambda: head | {"slots": [
            {"seq": s, "sample": sample.to_dict(),
             "rollouts": [rollout_to_dict(r) for r in group.rollouts] if group else None}
            for s, sample, group in slots]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved buffer; in-flight prompts come back queued, to be generated again."""
        if state["groups_per_batch"] != self.groups_per_batch:
            raise ValueError(f"checkpoint buffer has groups_per_batch "
                             f"{state['groups_per_batch']}, this run {self.groups_per_batch}: "
                             "resume with the same batch size")
        with self._cond:
            self._slots = {}
            for d in state["slots"]:
                sample = Sample.from_dict(d["sample"])
                slot = _Slot(sample)
                if d["rollouts"] is not None:
                    rollouts = tuple(rollout_from_dict(r) for r in d["rollouts"])
                    slot.state, slot.group = "done", PromptGroup(d["seq"], sample, rollouts)
                self._slots[int(d["seq"])] = slot
            self._next_seq = int(state["next_seq"])
            self._batches_taken = int(state["batches_taken"])
            self._next_version = int(state["next_version"])
            self._closed = None
            self._cond.notify_all()
