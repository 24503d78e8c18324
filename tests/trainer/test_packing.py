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
    balance,
    pack,
    packed_positions,
    token_micro_batches,
    use_varlen_attention,
)
from scalerl.trainer.policy import PolicyModule, packed_token_stats, token_stats
from scalerl.trainer.step import StepSettings, train_step


def test_rows_are_cut_in_order_into_runs_within_the_token_budget():
    lengths = torch.tensor([3, 5, 2, 9, 4])
    cut = token_micro_batches(lengths, 0, 1, 8)
    assert [c.tolist() for c in cut] == [[0, 1], [2], [3], [4]]  # 9 > 8 travels alone


def test_rows_go_longest_first_to_the_rank_with_the_fewest_tokens():
    # 9 -> r0 (tie: lowest rank); 5 -> r1; 4 -> r1 (5 < 9); 3 -> r0 (9 = 9: lowest); 2 -> r1
    assert balance([3, 5, 2, 9, 4], 2) == [[0, 3], [1, 2, 4]]  # 12 and 11 tokens
    # 10 -> r0, 7 -> r1, then every 1 to r2 (1 < 7 < 10): 10, 7 and 3 tokens
    assert balance([10, 1, 1, 1, 7], 3) == [[0], [4], [1, 2, 3]]
    assert balance([4, 4], 3) == [[0], [1], []]


def test_every_rank_gets_as_many_micro_batches():
    lengths = torch.tensor([3, 5, 2, 9, 4])  # rank 0: rows 0, 3; rank 1: rows 1, 2, 4
    assert [c.tolist() for c in token_micro_batches(lengths, 0, 2, 10)] == [[0], [3]]
    assert [c.tolist() for c in token_micro_batches(lengths, 1, 2, 10)] == [[1, 2], [4]]
    # 11 tokens: rank 0's 3 + 9 = 12 is two runs, rank 1's 5 + 2 + 4 = 11 one, then an empty one
    assert [c.tolist() for c in token_micro_batches(lengths, 0, 2, 11)] == [[0], [3]]
    assert [c.tolist() for c in token_micro_batches(lengths, 1, 2, 11)] == [[1, 2, 4], []]
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


@pytest.mark.parametrize("budget", [10_000, 120, 40, 1])
def test_a_step_by_tokens_is_the_step_of_one_padded_batch(budget):
    batch = batch_of(groups_of_lengths(SPREAD))
    base_w, base = step_result(batch, settings(micro_batch_size=len(batch)))
    w, stats = step_result(batch, settings(micro_batch_tokens=budget))
    torch.testing.assert_close(w, base_w, rtol=1e-5, atol=1e-6)
    assert stats["loss"] == pytest.approx(base["loss"], rel=1e-5)
    assert stats["train_tokens"] == base["train_tokens"]


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
