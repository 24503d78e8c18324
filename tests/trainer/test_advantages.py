"""Advantage normalisation against hand-computed values."""

import math

import pytest
import torch

from scalerl.trainer.advantages import compute_advantages, group_centred

REWARDS = torch.tensor([1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
# centred: group 0 mean -0.5 -> [1.5, -.5, -.5, -.5]; group 1 mean .5 -> [.5, .5, .5, -1.5];
# group 2 (all alike) -> [0, 0]
CENTRED = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5, 0.0, 0.0])


def test_group_centring():
    torch.testing.assert_close(group_centred(REWARDS, GROUPS), CENTRED)


def test_none_keeps_centred_values():
    torch.testing.assert_close(
        compute_advantages(REWARDS, GROUPS, normalise="none", eps=0.0), CENTRED)


def test_prompt_normalisation_divides_by_each_group_std():
    adv = compute_advantages(REWARDS, GROUPS, normalise="prompt", eps=1e-6)
    # groups 0 and 1: population std sqrt(3/4); group 2: 0 / (0 + eps) = 0
    s = math.sqrt(0.75)
    expected = torch.tensor([1.5 / s, -0.5 / s, -0.5 / s, -0.5 / s,
                             0.5 / s, 0.5 / s, 0.5 / s, -1.5 / s, 0.0, 0.0])
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-5)  # eps=1e-6 shifts ~1e-6


def test_batch_normalisation_uses_std_over_all_rows():
    adv = compute_advantages(REWARDS, GROUPS, normalise="batch", eps=0.0)
    # mean of centred is 0; var = (2.25 + 3*.25 + 3*.25 + 2.25) / 10 = 0.6
    torch.testing.assert_close(adv, CENTRED / math.sqrt(0.6))


def test_unknown_normalisation_is_named():
    with pytest.raises(KeyError, match="unknown advantage normalisation 'global'; registered: "
                                       "batch, none, prompt"):
        compute_advantages(REWARDS, GROUPS, normalise="global")
