"""Micro-batches by tokens, packed without padding: hand-worked cuts and layouts; packed rows give
the padded rows' logprobs and gradients (fp32, rows of very different lengths); a step is the
same whatever the token budget, and the same as with padded micro-batches."""

import random

import pytest
import torch
from accelerate import Accelerator
from conftest import VOCAB, tiny_qwen2

from scalerl.envs.base import Score
from scalerl.rollout.types import Rollout
from scalerl.trainer.batch import collate
from scalerl.trainer.losses import loss_kwargs
from scalerl.trainer.packing import (
    pack,
    packed_positions,
    token_micro_batches,
    use_varlen_attention,
)
from scalerl.trainer.policy import PolicyModule, packed_token_stats, token_stats
from scalerl.trainer.step import StepSettings, train_step


def test_rows_are_packed_first_fit_longest_first_within_the_token_budget():
    # 9 alone (> 8); 5 opens a bin (room 3); 4 does not fit there: a new bin (room 4); 3 fills
    # the first (5 + 3); 2 joins the 4. Costs 9, 8, 6: dealt in that order
    lengths = torch.tensor([3, 5, 2, 9, 4])
    cut = token_micro_batches(lengths, 0, 1, 8)
    assert [c.tolist() for c in cut] == [[3], [0, 1], [2, 4]]


def test_every_rank_gets_as_many_micro_batches_dealt_in_descending_cost():
    # 10 tokens: bins {9}, {5, 4} (rows 1, 4), {3, 2} (rows 0, 2); costs 9, 9, 5: the tie goes
    # to the bin of the earlier row, so index 0 is rows 1, 4 on rank 0 and row 3 on rank 1;
    # index 1 snakes back: rank 1 gets rows 0, 2 and rank 0 an empty one (the dummy)
    lengths = torch.tensor([3, 5, 2, 9, 4])
    assert [c.tolist() for c in token_micro_batches(lengths, 0, 2, 10)] == [[1, 4], []]
    assert [c.tolist() for c in token_micro_batches(lengths, 1, 2, 10)] == [[3], [0, 2]]
    # with attention (0.1 per token²) 9 costs 17.1 and 5 + 4 costs 13.1: row 3 goes first
    assert [c.tolist() for c in token_micro_batches(lengths, 0, 2, 10, 0.1)] == [[3], []]
    assert [c.tolist() for c in token_micro_batches(lengths, 1, 2, 10, 0.1)] == [[1, 4],
                                                                                [0, 2]]
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        token_micro_batches(lengths, 2, 2, 11)


def test_packing_lays_rows_end_to_end_with_positions_restarting():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    packed = pack(ids, torch.tensor([3, 2]))
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert packed.cu_seqlens.tolist() == [0, 3, 5] and packed.max_length == 3
    assert packed.cu_seqlens.dtype == torch.int32 and packed.bounds == (0, 3, 5)
    # row 0: prompt 2, completion 1 (token 7, predicted at 1); row 1: prompt 1, completion 1
    rows, cols, at = packed_positions(torch.tensor([2, 1]), torch.tensor([1, 1]))
    assert (rows.tolist(), cols.tolist(), at.tolist()) == ([0, 1], [0, 0], [1, 3])


def groups_of_lengths(lengths: list[tuple[int, int]], seed: int = 0) -> list[list[Rollout]]:
    """Groups of two rollouts with (prompt, completion) lengths as given: one correct, one wrong."""
    rng = random.Random(seed)
    groups = []
    for p, (prompt_len, completion_len) in enumerate(lengths):
        prompt = tuple(rng.randrange(1, VOCAB) for _ in range(prompt_len))
        group = []
        for g in range(2):
            tokens = tuple(rng.randrange(1, VOCAB) for _ in range(completion_len - g))
            status = "correct" if g == 0 else "wrong"
            group.append(Rollout(
                sample_id=f"s{p}", task="arith", prompt_token_ids=prompt, token_ids=tokens,
                logprobs=tuple(-rng.uniform(2.5, 5.0) for _ in tokens),
                versions=(0,) * len(tokens), finish_reason="stop", thinking_tokens=0,
                answer_tokens=len(tokens), completion="",
                score=Score(status=status), reward=1.0 if g == 0 else -1.0, group=g))
        groups.append(group)
    return groups


SPREAD = [(2, 3), (30, 60), (5, 9), (4, 100), (12, 2)]
"""(prompt, completion) lengths: rows from 3 to 104 tokens."""


def batch_of(groups):
    return collate(groups, normalise="batch", aggregation="prompt", pad_id=0)


def test_packed_rows_give_the_padded_rows_logprobs_and_gradients():
    batch = batch_of(groups_of_lengths(SPREAD))
    model = tiny_qwen2(seed=3)
    use_varlen_attention(model)  # SDPA itself on the padded rows
    weights = torch.randn(batch.mask.shape, generator=torch.Generator().manual_seed(0))
    results = []
    for packed in (False, True):
        model.zero_grad()
        if packed:
            p = pack(batch.input_ids, batch.prompt_lens + batch.completion_lens)
            stats = packed_token_stats(model, p, batch.prompt_lens, batch.completion_lens,
                                       temperature=0.7)
        else:
            stats = token_stats(model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                                batch.completion_lens, temperature=0.7)
        (stats.logprobs * batch.mask * weights).sum().backward()
        grads = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
        results.append((stats.logprobs * batch.mask, stats.entropy * batch.mask, grads))
    (lp, ent, grads), (plp, pent, pgrads) = results
    assert (lp - plp).abs().max() <= 1e-5 and (ent - pent).abs().max() <= 1e-5
    # fp32 roundoff of sums over ~300 tokens: 1.2e-5 seen on gradients of up to 6.3
    assert (grads - pgrads).abs().max() <= 1e-5 * grads.abs().max() and grads.abs().max() > 1e-3


def settings(micro_batch_size=64, micro_batch_tokens=None):
    return StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                        micro_batch_size=micro_batch_size, temperature=1.0, fp32_head=True,
                        max_grad_norm=None, micro_batch_tokens=micro_batch_tokens)


def step_result(batch, s: StepSettings, checkpointing: bool = False):
    from scalerl.trainer.policy import enable_gradient_checkpointing

    model = tiny_qwen2(seed=1)
    if checkpointing:
        enable_gradient_checkpointing(model)
    if s.micro_batch_tokens is not None:
        use_varlen_attention(model)
    model = PolicyModule(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    accelerator = Accelerator(cpu=True)
    model, opt = accelerator.prepare(model, opt)
    stats = train_step(accelerator, model, opt, sched, batch, s)
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach(), stats


@pytest.mark.parametrize(("budget", "micro_batches"), [(10_000, 1), (120, 4), (40, 6), (1, 10)])
def test_a_step_by_tokens_is_the_step_of_one_padded_batch(budget, micro_batches):
    # rows of 5, 4, 90, 89, 14, 13, 104, 103, 14, 13 tokens; 120: 104 + 14, 103 + 14,
    # 90 + 13 + 13, 89 + 5 + 4; 40: the four longest alone, 14 + 14 + 5 + 4, 13 + 13
    batch = batch_of(groups_of_lengths(SPREAD))
    base_w, base = step_result(batch, settings(micro_batch_size=len(batch)))
    w, stats = step_result(batch, settings(micro_batch_tokens=budget))
    torch.testing.assert_close(w, base_w, rtol=1e-5, atol=1e-6)
    assert stats["loss"] == pytest.approx(base["loss"], rel=1e-5)
    assert stats["train_tokens"] == base["train_tokens"]
    assert stats["micro_batches"] == micro_batches and stats["imbalance"] == 1.0  # one rank


def test_packed_rows_recomputed_by_gradient_checkpointing_give_the_same_step():
    # the backward recomputes each layer: it must see the rows' boundaries again
    batch = batch_of(groups_of_lengths(SPREAD))
    w, _ = step_result(batch, settings(micro_batch_tokens=120))
    w_ckpt, _ = step_result(batch, settings(micro_batch_tokens=120), checkpointing=True)
    torch.testing.assert_close(w_ckpt, w, rtol=1e-5, atol=1e-6)


def test_packed_rows_are_refused_by_an_attention_that_would_mix_them():
    model = tiny_qwen2()
    p = pack(torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([3, 2]))
    with pytest.raises(ValueError, match="not 'sdpa': call trainer.packing.use_varlen_attention"):
        packed_token_stats(model, p, torch.tensor([2, 1]), torch.tensor([1, 1]))
