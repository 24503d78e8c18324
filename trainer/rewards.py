"""Rewards: the one place a verdict's status becomes the number the policy is trained on.

A verdict (envs' `Score`) is a status, a detail and, when graded, a credit in [0, 1];
`RewardMap` maps it to a reward from the run's `advantages.correct_reward` /
`advantages.wrong_reward` (ScaleRL A.3: +1 for a correct answer, -1 for anything else): a graded
verdict's credit c lands linearly between them, wrong + c * (correct - wrong) (the fraction of
tests passed, an environment's own reward mapped to [0, 1]), so graded and all-or-nothing tasks
share one scale; `assign` writes it onto each rollout once per step. Everything
after (zero-variance filtering, advantages, the logged `reward/*`) reads `Rollout.reward`, so what
is logged is what is trained. `error` verdicts never reach this point (trainer/filters.py drops
them first). No filtering or advantage maths here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalerl.rollout.types import Rollout


@dataclass(frozen=True)
class RewardMap:
    """status -> reward: `correct` for a correct verdict, `wrong` for every other status."""

    correct: float = 1.0
    wrong: float = -1.0

    def __post_init__(self) -> None:
        if not self.correct > self.wrong:
            raise ValueError(f"the correct reward ({self.correct}) must be greater than the "
                             f"wrong reward ({self.wrong})")

    def __call__(self, status: str, credit: float | None = None) -> float:
        """The reward of a verdict: `correct` or `wrong` by status, or, graded, its `credit`
        placed linearly between them."""
        if credit is not None:
            return self.wrong + float(credit) * (self.correct - self.wrong)
        return self.correct if status == "correct" else self.wrong

    def assign(self, group: list[Rollout]) -> list[Rollout]:
        """The rollouts of `group`, each carrying the reward its verdict maps to."""
        return [replace(r, reward=self(r.score.status, r.score.reward)) for r in group]


def rewards_of(group: list[Rollout]) -> list[float]:
    """The rewards `assign` gave; a ValueError naming the rollout when one has none."""
    missing = [r for r in group if r.reward is None]
    if missing:
        r = missing[0]
        raise ValueError(f"rollout {r.task}/{r.sample_id}#{r.group} has no reward: rewards are "
                         "assigned by RewardMap.assign before filtering and collation")
    return [float(r.reward) for r in group]  # type: ignore[arg-type]
