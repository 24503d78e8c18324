"""The multitask prompt sampler: a seeded, checkpointable stream of training samples.

Each task's train split is walked in a fresh seeded permutation per epoch; the task of each draw
is chosen by weighted round-robin credit (deterministic, exact ratios over time). Retired prompts
(No-Positive-Resampling) are skipped. The whole position is a small dict (`state_dict`), so a
resumed run draws exactly the prompts the killed run would have. No generation here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from scalerl.envs.base import Sample


class ExhaustedError(RuntimeError):
    """Every prompt of every task is retired: nothing left to sample."""


class TaskSampler:
    """`sampler()` -> the next training Sample of the mixture."""

    def __init__(self, samples: Mapping[str, Sequence[Sample]], weights: Mapping[str, float], *,
                 seed: int = 0, is_retired: Callable[[str], bool] | None = None):
        for name, rows in samples.items():
            if not rows:
                raise ValueError(f"task {name!r} has no training samples")
        total = sum(weights[name] for name in samples)
        self.samples = dict(samples)
        self.shares = {name: weights[name] / total for name in samples}
        self.seed = seed
        self.is_retired = is_retired or (lambda key: False)
        self.credit = {name: 0.0 for name in samples}
        self.epoch = {name: 0 for name in samples}
        self.pos = {name: 0 for name in samples}
        self.drawn = 0
        self._orders: dict[tuple[str, int], np.ndarray] = {}

    def _order(self, name: str) -> np.ndarray:
        key = (name, self.epoch[name])
        if key not in self._orders:
            task_index = sorted(self.samples).index(name)
            rng = np.random.default_rng([self.seed, task_index, self.epoch[name]])
            self._orders = {key: rng.permutation(len(self.samples[name]))} | {
                k: v for k, v in self._orders.items() if k[0] != name}
        return self._orders[key]

    def _pick_task(self, live: list[str]) -> str:
        for name in live:
            self.credit[name] += self.shares[name]
        name = max(live, key=lambda n: (self.credit[n], -sorted(self.samples).index(n)))
        self.credit[name] -= sum(self.shares[n] for n in live)
        return name

    def _next_of(self, name: str) -> Sample | None:
        """The task's next non-retired sample; None if all are retired."""
        rows = self.samples[name]
        for _ in range(2 * len(rows)):
            if self.pos[name] >= len(rows):
                self.epoch[name] += 1
                self.pos[name] = 0
            sample = rows[int(self._order(name)[self.pos[name]])]
            self.pos[name] += 1
            if not self.is_retired(f"{sample.task}/{sample.id}"):
                return sample
        return None

    def __call__(self) -> Sample:
        live = list(self.samples)
        while live:
            name = self._pick_task(live)
            sample = self._next_of(name)
            if sample is not None:
                self.drawn += 1
                return sample
            live.remove(name)
        raise ExhaustedError("every training prompt of every task is retired "
                             "(No-Positive-Resampling); lower filters.retire_threshold or "
                             "disable filters.retire")

    def draw(self, count: int) -> list[Sample]:
        return [self() for _ in range(count)]

    def state_dict(self) -> dict[str, Any]:
        return {"credit": dict(self.credit), "epoch": dict(self.epoch), "pos": dict(self.pos),
                "drawn": self.drawn, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state["pos"]) != set(self.samples):
            raise ValueError(f"sampler state is for tasks {sorted(state['pos'])}, this run has "
                             f"{sorted(self.samples)}")
        self.credit = dict(state["credit"])
        self.epoch = {k: int(v) for k, v in state["epoch"].items()}
        self.pos = {k: int(v) for k, v in state["pos"].items()}
        self.drawn = int(state["drawn"])
        self.seed = int(state["seed"])
