"""Rewards are mapped from verdicts once, from the run's settings: what is logged is what trains.

The rollouts are hand-made (tests/trainer/conftest.py) so every expected figure is worked out by
hand from the statuses and the reward settings below.
"""

import dataclasses

import pytest
import torch
from conftest import fake_groups

from scalerl.envs.base import Score
from scalerl.trainer.batch import collate, prepare_groups
from scalerl.trainer.filters import PromptRetirement
from scalerl.trainer.metrics import step_metrics
from scalerl.trainer.rewards import RewardMap, rewards_of


def verdicts(group, statuses, finish=None):
    finish = finish or ["stop"] * len(statuses)
    return [dataclasses.replace(r, score=Score(s), reward=None, finish_reason=f)
            for r, s, f in zip(group, statuses, finish, strict=True)]


def test_the_logged_reward_is_the_trained_reward_under_other_settings():
    rewards = RewardMap(correct=2.0, wrong=-0.5)
    g = fake_groups(n_prompts=3, n=4)
    g[0] = verdicts(g[0], ["correct", "wrong", "no_answer", "error"])   # error: never rewarded
    g[1] = verdicts(g[1], ["correct", "correct", "wrong", "timeout"],
                    ["stop", "truncated", "stop", "stop"])            # truncated: dropped
    g[2] = verdicts(g[2], ["wrong"] * 4)                                 # zero variance
    kept, report = prepare_groups(g, truncation="drop", rewards=rewards,
                                  zero_variance_filter=True, retirement=PromptRetirement())
    # Rewarded: g0 (2, -.5, -.5), g1 without its truncation (2, -.5, -.5), g2 (-.5 x 4).
    assert [rewards_of(k) for k in report.rewarded] == [[2.0, -0.5, -0.5]] * 2 + [[-0.5] * 4]
    metrics = step_metrics(g, report, {}, {}, train_s=1.0, retired=0, prompts=10, lr=1e-6)
    assert metrics["reward/mean"] == pytest.approx((2 * 2.0 + 8 * -0.5) / 10)
    assert metrics["reward/arith"] == metrics["reward/mean"]
    batch = collate(kept, normalise="none", aggregation="prompt", pad_id=0)
    # Trained: the two kept groups, centred on their mean 1/3: (5/3, -5/6, -5/6) each.
    trained = sorted(batch.advantages.squeeze(-1).tolist())
    assert trained == pytest.approx(sorted([5 / 3, -5 / 6, -5 / 6] * 2))
    # The same rollouts under the default ±1 give other figures: the map is the one input.
    _, default = prepare_groups(g, truncation="drop", rewards=RewardMap(),
                                zero_variance_filter=True, retirement=PromptRetirement())
    logged = step_metrics(g, default, {}, {}, train_s=1.0, retired=0, prompts=10, lr=1e-6)
    assert logged["reward/mean"] == pytest.approx((2 * 1.0 + 8 * -1.0) / 10)


def test_truncation_wrong_trains_and_logs_the_wrong_reward():
    rewards = RewardMap(correct=1.0, wrong=0.0)
    [group] = fake_groups(n_prompts=1, n=2)
    group = verdicts(group, ["correct", "correct"], ["truncated", "stop"])
    kept, report = prepare_groups([group], truncation="wrong", rewards=rewards,
                                  zero_variance_filter=True, retirement=PromptRetirement())
    assert rewards_of(kept[0]) == [0.0, 1.0]
    assert step_metrics([group], report, {}, {}, train_s=1.0, retired=0, prompts=1,
                        lr=1e-6)["reward/mean"] == 0.5


def test_collate_refuses_rollouts_with_no_reward():
    [group] = fake_groups(n_prompts=1, n=2)
    group = [dataclasses.replace(r, reward=None) for r in group]
    with pytest.raises(ValueError, match=r"rollout arith/s0#0 has no reward"):
        collate([group], normalise="none", aggregation="prompt", pad_id=0)


def test_a_reward_map_needs_correct_above_wrong():
    with pytest.raises(ValueError, match=r"correct reward \(0\.0\) must be greater than the "
                                         r"wrong reward \(0\.0\)"):
        RewardMap(correct=0.0, wrong=0.0)
    assert [RewardMap()(s) for s in ("correct", "wrong", "no_answer", "timeout")] == [1, -1, -1, -1]
    assert torch.tensor(rewards_of(RewardMap(3.0, 1.0).assign(fake_groups(1, 2)[0]))).tolist() \
        == [3.0, 1.0]
