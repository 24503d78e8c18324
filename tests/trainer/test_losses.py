"""Hand-computed values for every loss and aggregation (default torch tolerances)."""

import math

import pytest
import torch

from scalerl.trainer.losses import (
    LOSSES,
    aggregate,
    aggregation_weights,
    cispo_loss,
    dapo_loss,
    grpo_loss,
    gspo_loss,
    loss_kwargs,
)

ONE = torch.ones(1, 1)


def test_cispo_truncates_ratio_at_absolute_cap_and_keeps_reinforce_form():
    logprobs = torch.tensor([[-0.5, -2.0]])
    old = torch.tensor([[-1.0, -4.0]])  # ratios e^0.5 = 1.6487 and e^2 = 7.389 -> capped at 4
    adv = torch.tensor([[2.0]])
    per_token, stats = cispo_loss(logprobs, old, adv, torch.ones(1, 2), eps_max=4.0)
    # -sg(min(rho, 4)) * A * logprob: -(e^0.5)(2)(-0.5) = e^0.5 ; -(4)(2)(-2) = 16
    torch.testing.assert_close(per_token, torch.tensor([[math.exp(0.5), 16.0]]))
    torch.testing.assert_close(stats["cispo_trunc_frac"], torch.tensor([[0.0, 1.0]]))


def test_cispo_gradient_is_stopped_ratio_times_advantage():
    logprobs = torch.tensor([[-0.5, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -4.0]])
    per_token, _ = cispo_loss(logprobs, old, torch.tensor([[2.0]]), torch.ones(1, 2), eps_max=4.0)
    per_token.sum().backward()
    # d/dlogprob of -w*A*logprob with w stopped = -w*A; a truncated token still has a gradient.
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2.0 * math.exp(0.5), -8.0]]))


def test_grpo_clips_symmetrically():
    logprobs = torch.tensor([[0.5, 0.5, -0.5, 0.0]])
    old = torch.zeros(1, 4)
    adv_row = torch.tensor([[1.0, -1.0, -1.0, 1.0]])  # per-token advantages for coverage
    per_token, stats = grpo_loss(logprobs, old, adv_row, ONE, clip_low=0.2, clip_high=0.2)
    # rho=e^.5, A=+1: -min(1.6487, 1.2) = -1.2 (clipped)
    # rho=e^.5, A=-1: -min(-1.6487, -1.2) = 1.6487 (unclipped branch wins)
    # rho=e^-.5, A=-1: -min(-0.6065, -0.8) = 0.8 (clipped)
    # rho=1, A=+1: -1
    expected = torch.tensor([[-1.2, math.exp(0.5), 0.8, -1.0]])
    torch.testing.assert_close(per_token, expected)
    torch.testing.assert_close(stats["clip_frac"], torch.tensor([[1.0, 0.0, 1.0, 0.0]]))


def test_dapo_clip_higher_lets_ratio_1_25_through_where_grpo_clips():
    logprobs, old = torch.tensor([[math.log(1.25)]]), torch.zeros(1, 1)
    kw = loss_kwargs("dapo", {})
    assert kw == {"clip_low": 0.2, "clip_high": 0.28}
    dapo, _ = dapo_loss(logprobs, old, ONE, ONE, **kw)
    grpo, _ = grpo_loss(logprobs, old, ONE, ONE, **loss_kwargs("grpo", {}))
    torch.testing.assert_close(dapo, torch.tensor([[-1.25]]))
    torch.testing.assert_close(grpo, torch.tensor([[-1.2]]))


def test_gspo_uses_length_normalised_sequence_ratio_and_ignores_masked_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    old = torch.tensor([[-1.002, -2.004, 5.0], [-1.01, -1.01, -1.01]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0], [1.0]])
    per_token, stats = gspo_loss(logprobs, old, adv, mask, clip_low=3e-3, clip_high=5e-3,
                                 length_norm=True)
    # row 0: mean log-ratio (0.002 + 0.004)/2 = 0.003 -> s = e^0.003, inside 1 +/- clip
    # row 1: mean 0.01 -> s = e^0.01 = 1.01005 > 1.005 -> clipped at 1.005
    expected = torch.tensor([[-math.exp(0.003)] * 3, [-1.005] * 3])
    torch.testing.assert_close(per_token, expected)
    torch.testing.assert_close(stats["clip_frac"][:, 0], torch.tensor([0.0, 1.0]))


def test_gspo_without_length_norm_sums_the_log_ratio():
    logprobs = torch.tensor([[-1.0, -2.0]])
    old = torch.tensor([[-1.002, -2.002]])  # sum 0.004 -> e^0.004 = 1.004008 < 1.005
    per_token, _ = gspo_loss(logprobs, old, ONE, torch.ones(1, 2), clip_low=3e-3,
                             clip_high=5e-3, length_norm=False)
    torch.testing.assert_close(per_token, torch.full((1, 2), -math.exp(0.004)))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_zero_advantage_gives_zero_gradient(name):
    logprobs = torch.tensor([[-0.3, -1.2, -0.7]], requires_grad=True)
    old = torch.tensor([[-0.5, -1.0, -0.7]])
    mask = torch.ones(1, 3)
    spec = LOSSES[name]
    per_token, _ = spec.fn(logprobs, old, torch.zeros(1, 1), mask, **spec.defaults)
    aggregate(per_token, aggregation_weights("token", mask, torch.zeros(1))).backward()
    torch.testing.assert_close(logprobs.grad, torch.zeros(1, 3))


MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
VALUES = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0],
                       [5.0, 6.0, 100.0, 100.0]])
PROMPTS = torch.tensor([0, 0, 1])


@pytest.mark.parametrize("how, expected", [
    ("token", 21.0 / 6.0),  # (1+2+3+4+5+6) / 6 tokens
    ("sample", 4.25),  # prompt 0: (mean(1,2,3) + mean(4)) / 2 = 3; prompt 1: 5.5; (3 + 5.5) / 2
    ("prompt", 4.0),  # prompt 0: (1+2+3+4) / 4 = 2.5; prompt 1: 11 / 2 = 5.5; (2.5 + 5.5) / 2
])
def test_aggregations_match_hand_values(how, expected):
    weights = aggregation_weights(how, MASK, PROMPTS)
    torch.testing.assert_close(aggregate(VALUES, weights), torch.tensor(expected))


def test_token_aggregation_equals_manual_masked_mean():
    per_token = torch.randn(3, 4)
    weights = aggregation_weights("token", MASK, PROMPTS)
    torch.testing.assert_close(aggregate(per_token, weights),
                               (per_token * MASK).sum() / MASK.sum())


@pytest.mark.parametrize("how", ["token", "sample", "prompt"])
def test_micro_batches_with_global_weights_equal_one_big_batch(how):
    torch.manual_seed(0)
    logprobs = -torch.rand(3, 4)
    old = logprobs.detach() + 0.1 * torch.randn(3, 4)
    adv = torch.tensor([[1.0], [-1.0], [0.5]])
    weights = aggregation_weights(how, MASK, PROMPTS)

    def loss_of(rows, lp):
        per_token, _ = cispo_loss(lp, old[rows], adv[rows], MASK[rows], eps_max=4.0)
        return aggregate(per_token, weights[rows])

    full = logprobs.clone().requires_grad_()
    loss_of(slice(0, 3), full).backward()
    micro = logprobs.clone().requires_grad_()
    total = loss_of(slice(0, 2), micro[0:2]) + loss_of(slice(2, 3), micro[2:3])
    total.backward()
    torch.testing.assert_close(micro.grad, full.grad)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(KeyError, match="registered: prompt, sample, token"):
        aggregation_weights("seq", MASK, PROMPTS)
    with pytest.raises(KeyError, match="cispo"):
        loss_kwargs("ppo", {})
