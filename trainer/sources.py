"""Rollout sources: where the training loop's groups come from, behind one interface.

`RolloutSource` is what `trainer/loop.py` calls: `next_groups` before a step, `on_step` after
it. `PPOOffPolicy` (here) generates k minibatches with one policy and pushes the weights into the
generator before the next round; `PipelineSource` (trainer/pipeline_source.py) streams with
in-flight updates behind the same calls. The loop picks one by `offpolicy.mode` from its
`SOURCES`. No optimisation or logging here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from scalerl.envs.base import Sample
from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.rollout.types import Budget, Rollout
from scalerl.trainer.filters import Group
from scalerl.trainer.publish import Publisher, make_publisher, publish_metrics

LazyWeights = Callable[[], Iterable[tuple[str, torch.Tensor]]]
"""Called when the weights are needed: (name, tensor) pairs of the current policy."""


class RolloutSource(Protocol):
    """Where training groups come from. Rank 0 only; other ranks receive the groups."""

    streams: bool
    """Whether it keeps generating on its generator between the loop's calls (PipelineRL): a
    held-out validation there then holds at most `val.engine_share` of each engine."""

    def next_groups(self, trainer_version: int) -> tuple[list[Group], dict[str, float]]:
        """The groups (n rollouts of one prompt each) of the next optimizer step, and metrics."""

    def on_step(self, version: int, weights: LazyWeights) -> dict[str, float]:
        """The trainer finished the step that produced policy `version`."""

    def wants_weights(self) -> bool:
        """Whether the weights handed at the next `on_step` will be sent to the generator (a
        sharded policy is gathered only then)."""

    def ensure_synced(self) -> dict[str, float]:
        """Make the generator hold the latest weights (before held-out validation)."""

    def idle(self) -> dict[str, float]:
        """Seconds the generator spent generating and syncing so far."""

    def state_dict(self) -> dict[str, Any]: ...

    def snapshot(self) -> Callable[[], dict[str, Any]]:
        """`state_dict` as of now, built when called (cheap now: the loop takes one per step)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SourceSettings:
    """Plain values a rollout source needs (from the run config)."""

    budgets: Mapping[str, Budget]
    """Length budget per task."""
    prompts_per_step: int
    rollouts_per_prompt: int
    temperature: float
    seed: int
    k: int
    """PPO-offpolicy-k: minibatches generated per round (one policy), one step each (PipelineRL
    takes one step per batch and does not read it)."""
    max_lag: int
    """PipelineRL-k: most versions a trained rollout may lag behind the trainer."""
    max_in_flight: int | None = None
    """PipelineRL-k: most rollouts generating at once (None: from the engines' concurrency)."""
    batch_wait_s: float | None = None
    """PipelineRL-k: most seconds to wait for a batch (None: no limit while progressing)."""
    stall_s: float | None = None
    """PipelineRL-k: most seconds to wait while generation makes no progress (None: no limit)."""


def _published() -> Iterable[tuple[str, torch.Tensor]]:
    raise RuntimeError("these weights were already published and released")


def round_seed(seed: int, batch_index: int) -> int:
    """The generation seed of round (or batch) `batch_index`: PPO-offpolicy passes it per round,
    PipelineRL per batch of prompts, so with max_lag 0 the two generate the very same rollouts."""
    return seed * 1_000_003 + batch_index


def skip_too_long(groups: list[Group]) -> tuple[list[Group], dict[str, float]]:
    """Leave out the groups whose prompt could not fit its longest completion (finish reason
    `prompt_too_long`: never generated); count them, in all and per task."""
    kept: list[Group] = []
    skipped: Counter[str] = Counter()
    for group in groups:
        if group and group[0].finish_reason == "prompt_too_long":
            skipped[group[0].task] += 1
        else:
            kept.append(group)
    metrics = {"rollout/prompt_too_long": float(sum(skipped.values()))}
    metrics |= {f"rollout/prompt_too_long/{task}": float(n) for task, n in skipped.items()}
    return kept, metrics


class PPOOffPolicy:
    """PPO-offpolicy-k: generate k x prompts_per_step prompts with one policy, serve them as k
    minibatches, and push the trainer's weights into the generator before the next round."""

    streams = False  # nothing generates between rounds: validation takes the engines whole

    def __init__(self, generator, sampler: Callable[[], Sample], s: SourceSettings,
                 publisher: Publisher | None = None):
        self.generator, self.sampler, self.s = generator, sampler, s
        self.publisher = publisher or make_publisher("files", generator)
        self.pending: list[list[Group]] = []
        self.round = 0
        self._weights: tuple[int, LazyWeights] | None = None
        self.gen_s = 0.0
        self.sync_s = 0.0

    # -- the two calls the loop makes -----------------------------------------------------
    def next_groups(self, trainer_version: int) -> tuple[list[Group], dict[str, float]]:
        metrics: dict[str, float] = {}
        if not self.pending:
            metrics |= self.ensure_synced()
            metrics |= self._generate_round()
        groups, skipped = skip_too_long(self.pending.pop(0))
        return groups, metrics | skipped

    def on_step(self, version: int, weights: LazyWeights) -> dict[str, float]:
        self._weights = (version, weights)  # pushed lazily, right before the next round
        return {}

    def wants_weights(self) -> bool:
        return not self.pending  # the round is over: the next next_groups publishes

    # -- internals ------------------------------------------------------------------------
    def ensure_synced(self) -> dict[str, float]:
        if self._weights is None or self._weights[0] == self.generator.version:
            return {}
        version, weights = self._weights
        t = time.perf_counter()
        stats = self.publisher.publish(weights(), version)
        self._weights = (version, _published)  # drop the gathered tensors (GPU memory for NCCL)
        took = time.perf_counter() - t
        self.sync_s += took
        return publish_metrics(stats, self.publisher, took)

    def _generate_round(self) -> dict[str, float]:
        s = self.s
        position = self.sampler.state_dict() if hasattr(self.sampler, "state_dict") else None
        samples = [self.sampler() for _ in range(s.k * s.prompts_per_step)]
        seed = round_seed(s.seed, self.round)
        t = time.perf_counter()
        try:
            groups = generate_groups(self.generator, samples, s.budgets,
                                     n=s.rollouts_per_prompt, temperature=s.temperature,
                                     seed=seed)
        except GeneratorUnavailable:  # a checkpoint taken now must not skip these prompts
            if position is not None:
                self.sampler.load_state_dict(position)
            raise
        took = time.perf_counter() - t
        self.gen_s += took
        self.round += 1
        p = s.prompts_per_step
        self.pending = [groups[i * p:(i + 1) * p] for i in range(s.k)]
        tokens = sum(len(r.token_ids) for g in groups for r in g)
        return {"rollout/gen_s": took, "rollout/tokens_per_s": tokens / max(took, 1e-9),
                "rollout/round_tokens": float(tokens)} | self.generator.metrics()

    def idle(self) -> dict[str, float]:
        return {"gen_s": self.gen_s, "sync_s": self.sync_s}

    def state_dict(self) -> dict[str, Any]:
        sampler_state = getattr(self.sampler, "state_dict", None)
        return {"round": self.round, "pending": list(self.pending),  # a copy: pop() follows
                "sampler": sampler_state() if sampler_state else None}

    def snapshot(self) -> Callable[[], dict[str, Any]]:
        state = self.state_dict()  # small: pending holds references to frozen rollouts
        return lambda: state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round = int(state["round"])
        self.pending = list(state["pending"])
        if state.get("sampler") is not None:
            self.sampler.load_state_dict(state["sampler"])

    def close(self) -> None:
        self.publisher.close()


def generate_groups(generator, samples: list[Sample], budgets: Mapping[str, Budget], *, n: int,
                    temperature: float, seed: int) -> list[Group]:
    """n rollouts per sample, one generate call per task (each with its budget) run at once;
    groups come back in the order of `samples`."""
    by_task: dict[str, list[int]] = {}
    for i, sample in enumerate(samples):
        by_task.setdefault(sample.task, []).append(i)

    def run(task: str) -> list[Rollout]:
        rows = [samples[i] for i in by_task[task]]
        return generator.generate(rows, n=n, budget=budgets[task], temperature=temperature,
                                  seed=seed)

    groups: list[Group | None] = [None] * len(samples)
    with ThreadPoolExecutor(max(1, len(by_task))) as pool:
        results = dict(zip(by_task, pool.map(run, by_task), strict=True))
    for task, rollouts in results.items():
        if len(rollouts) != n * len(by_task[task]):
            raise RuntimeError(f"generator returned {len(rollouts)} rollouts for "
                               f"{len(by_task[task])} {task} samples x n={n}")
        for j, i in enumerate(by_task[task]):
            groups[i] = list(rollouts[j * n:(j + 1) * n])
    return groups  # type: ignore[return-value]
