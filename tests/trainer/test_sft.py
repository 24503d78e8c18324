"""The SFT routine: masked completion loss by hand, batching, learning, determinism."""

import math

import pytest
import torch

from scalerl.trainer.sft import (
    SFTConfig,
    SFTExample,
    batch_order,
    collate,
    completion_loss,
    lr_at,
    sft,
)


def test_collate_pads_right_and_masks_only_completion_tokens():
    ids, attn, comp = collate([SFTExample((5, 6), (7,)), SFTExample((5,), (8, 9, 1))], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 0], [5, 8, 9, 1]]
    assert attn.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert comp.tolist() == [[False, False, True, False], [False, True, True, True]]


def test_completion_loss_uniform_logits_is_log_vocab():
    logits = torch.zeros(1, 4, 10)
    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.tensor([[False, False, True, True]])
    assert completion_loss(logits, ids, mask).item() == pytest.approx(math.log(10))


def test_completion_loss_by_hand_ignores_prompt_positions():
    # vocab 2; position 0 predicts ids[1] (prompt: masked), position 1 predicts ids[2] = 1.
    logits = torch.tensor([[[100.0, -100.0], [0.0, math.log(3.0)], [0.0, 0.0]]])
    ids = torch.tensor([[0, 1, 1]])
    mask = torch.tensor([[False, False, True]])
    # p(1) at position 1 = 3 / (1 + 3) -> loss = -log(0.75); position 0's huge logits ignored
    assert completion_loss(logits, ids, mask).item() == pytest.approx(-math.log(0.75))


def test_lr_schedule_warms_up_then_decays_to_floor():
    cfg = SFTConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_frac=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(100, cfg) == pytest.approx(0.1)


def test_batch_order_covers_each_example_once_per_epoch():
    order = batch_order(8, SFTConfig(steps=4, batch_size=4, seed=3))
    assert sorted(order[0] + order[1]) == list(range(8))
    assert sorted(order[2] + order[3]) == list(range(8))


def _tiny_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=32)
    return Qwen2ForCausalLM(cfg)


def _copy_task():
    # prompt "a b" -> completion "b a <eos=1>" for a, b in 2..9
    return [SFTExample((a, b), (b, a, 1)) for a in range(2, 10) for b in range(2, 10)]


def test_sft_learns_and_is_deterministic():
    examples = _copy_task()
    cfg = SFTConfig(steps=60, batch_size=16, lr=1e-2, warmup_steps=5, seed=1)
    m1, m2 = _tiny_lm(), _tiny_lm()
    r1 = sft(m1, examples, cfg, pad_id=0)
    r2 = sft(m2, examples, cfg, pad_id=0)
    assert r1.losses == r2.losses
    for p1, p2 in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(p1, p2)
    assert r1.losses[0] > 2.0  # about log(16) at init
    assert sum(r1.losses[-5:]) / 5 < 0.5 * r1.losses[0]
    assert r1.tokens == 60 * 16 * 3


def test_sft_rejects_empty_data_and_bad_config():
    with pytest.raises(ValueError, match="no training examples"):
        sft(_tiny_lm(), [], SFTConfig(steps=1), pad_id=0)
    with pytest.raises(ValueError, match="batch_size"):
        SFTConfig(batch_size=0)


def test_collate_masks_the_completion_tokens_an_example_marks_untrained():
    # completion (7, 8, 9, 1): 8 and 9 are a tool's output (read, not written): out of the loss
    ex = SFTExample((5,), (7, 8, 9, 1), completion_mask=(True, False, False, True))
    ids, _, comp = collate([ex, SFTExample((5, 6), (7,))], pad_id=0)
    assert ids.tolist() == [[5, 7, 8, 9, 1], [5, 6, 7, 0, 0]]
    assert comp.tolist() == [[False, True, False, False, True],
                             [False, False, True, False, False]]


def test_masked_tokens_carry_no_loss():
    # vocab 2: targets ids[1..3] = 1, 0, 1; the middle one is masked, so logits that get it
    # wrong cost nothing: loss = mean of -log p over the two trained targets only.
    logits = torch.tensor([[[0.0, math.log(3.0)], [100.0, -100.0], [0.0, 0.0], [0.0, 0.0]]])
    ex = SFTExample((0,), (1, 0, 1), completion_mask=(True, False, True))
    ids, _, comp = collate([ex], pad_id=0)
    expected = (-math.log(0.75) - math.log(0.5)) / 2
    assert completion_loss(logits, ids, comp).item() == pytest.approx(expected)


def test_completion_mask_length_must_match():
    with pytest.raises(ValueError, match="3 entries for 2 completion tokens"):
        SFTExample((1,), (2, 3), completion_mask=(True, True, False))
