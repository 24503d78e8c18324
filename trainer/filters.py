"""Batch filters: verifier errors, truncated-rollout policy, zero-variance filtering, NPR.

A rollout whose verdict is `error` (the verifier or the sandbox failed, not the candidate) never
trains: `drop_errors` takes it out before advantages are computed, and `ErrorWatch` says when
errors are frequent enough to stop the run. Zero-variance groups (all rewards alike) are dropped
from the loss with no refilling (ScaleRL §3.2). `PromptRetirement` keeps each prompt's pass-rate
history and permanently retires prompts whose pass rate reaches the threshold (POLARIS; ScaleRL
§3.2); its state is a plain dict for checkpoints. This module does not sample prompts or compute
losses.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scalerl.envs.base import Score
from scalerl.rollout.types import Rollout
from scalerl.sandbox.registry import Registry

Group = list[Rollout]
"""The n rollouts of one prompt."""

UNTRAINED_STATUSES: tuple[str, ...] = ("error",)
"""Verdicts the policy never trains on: the verifier or the sandbox failed, so the verdict says
nothing about the completion. Every other status trains with its reward: `correct` +1; `wrong`,
`no_answer` and `timeout` (the candidate's own program passed its time limit, or its answer
kept math-verify past its deadline) -1."""


def drop_errors(group: Group) -> Group:
    """The rollouts of `group` whose verdict can be trained on (no `error` verdicts)."""
    return [r for r in group if r.score.status not in UNTRAINED_STATUSES]

TruncationFn = Callable[[Group], Group]
TRUNCATION_POLICIES: Registry[TruncationFn] = Registry("truncation policy")
register_truncation = TRUNCATION_POLICIES.register


@register_truncation("drop")
def _drop(group: Group) -> Group:
    """Exclude truncated rollouts from the batch (the ScaleRL paper's "effective batch")."""
    return [r for r in group if r.finish_reason != "truncated"]


@register_truncation("wrong")
def _wrong(group: Group) -> Group:
    """Keep truncated rollouts with a `wrong` verdict (so the wrong reward), whatever the
    verifier said."""
    return [
        replace(r, score=Score(status="wrong", detail=f"truncated (verifier: {r.score.status})"))
        if r.finish_reason == "truncated" else r
        for r in group
    ]


@register_truncation("keep")
def _keep(group: Group) -> Group:
    """Keep truncated rollouts with the verifier's score."""
    return list(group)


def apply_truncation(group: Group, policy: str) -> Group:
    return TRUNCATION_POLICIES[policy](group)


def is_zero_variance(rewards: Sequence[float]) -> bool:
    """True when every reward of the group is the same (advantages all zero)."""
    return len(rewards) == 0 or max(rewards) == min(rewards)


def pass_rate(group: Group) -> float:
    return sum(r.score.correct for r in group) / max(len(group), 1)


class PromptRetirement:
    """No-Positive-Resampling: retire a prompt once its pass rate is >= `threshold`.

    `history="last"` judges by the last observed group pass rate; `"mean"` by the mean of all
    observed group pass rates. Retirement is permanent. Keys are `task/sample_id`.
    """

    HISTORIES = ("last", "mean")

    def __init__(self, threshold: float = 0.9, history: str = "last", enabled: bool = True):
        if history not in self.HISTORIES:
            raise ValueError(f"history {history!r} must be one of {', '.join(self.HISTORIES)}")
        self.threshold = threshold
        self.history = history
        self.enabled = enabled
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self.retired: set[str] = set()

    def observe(self, key: str, rate: float) -> bool:
        """Record one group pass rate for `key`; returns True if this retires the prompt."""
        self._sums[key] = self._sums.get(key, 0.0) + rate
        self._counts[key] = self._counts.get(key, 0) + 1
        judged = rate if self.history == "last" else self._sums[key] / self._counts[key]
        if self.enabled and judged >= self.threshold and key not in self.retired:
            self.retired.add(key)
            return True
        return False

    def is_retired(self, key: str) -> bool:
        return key in self.retired

    def state_dict(self) -> dict[str, Any]:
        return {"sums": dict(self._sums), "counts": dict(self._counts),
                "retired": sorted(self.retired)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._sums = dict(state["sums"])
        self._counts = {k: int(v) for k, v in state["counts"].items()}
        self.retired = set(state["retired"])


_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\d+")


def error_kind(detail: str) -> str:
    """`detail` with quoted names and numbers blanked, so errors that differ only in a file name
    or a line number count as one kind."""
    return _VARYING.sub("_", detail)[:160]


@dataclass
class ErrorWatch:
    """Stops a run whose verifiers keep failing: `observe` returns a one-line reason once more
    than `max_frac` of a step's rollouts were `error` verdicts for `patience` steps in a row."""

    max_frac: float
    patience: int
    streak: int = 0

    def observe(self, groups: list[Group]) -> str | None:
        rollouts = [r for g in groups for r in g]
        errors = [r for r in rollouts if r.score.status in UNTRAINED_STATUSES]
        frac = len(errors) / max(len(rollouts), 1)
        self.streak = self.streak + 1 if frac > self.max_frac else 0
        if self.streak < self.patience:
            return None
        return self.reason(rollouts, errors, frac)

    def reason(self, rollouts: list[Rollout], errors: list[Rollout], frac: float) -> str:
        per_task = Counter(r.task for r in rollouts)
        failing = Counter(r.task for r in errors)
        tasks = ", ".join(f"{t} {n}/{per_task[t]}" for t, n in failing.most_common())
        kinds = Counter(error_kind(r.score.detail) for r in errors)
        kind, count = kinds.most_common(1)[0]
        example = next(r.score.detail for r in errors if error_kind(r.score.detail) == kind)
        return (f"verifier errors on {frac:.0%} of the rollouts for {self.streak} steps in a row "
                f"(filters.max_error_frac {self.max_frac:g}); error verdicts by task: {tasks}; "
                f"commonest error ({count} of {len(errors)}): {' '.join(example.split())[:200]}")
