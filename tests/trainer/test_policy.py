"""Per-token logprobs/entropy of completions and the FP32 head."""

import copy

import pytest
import torch
from conftest import fake_groups, tiny_qwen2

from scalerl.trainer.batch import collate
from scalerl.trainer.policy import completion_positions, token_stats


def batch_of(groups):
    return collate(groups, normalise="batch", aggregation="prompt", pad_id=0)


def test_completion_positions_point_at_the_previous_token():
    pos = completion_positions(torch.tensor([3, 2]), torch.tensor([2, 4]))
    # row 0: completion at 3,4 -> predicted from 2,3 ; padding clamps to the last real one (3)
    assert pos.tolist() == [[2, 3, 3, 3], [1, 2, 3, 4]]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_a_full_forward_at_the_sampling_temperature(model, temperature):
    batch = batch_of(fake_groups())
    stats = token_stats(model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                        batch.completion_lens, temperature=temperature)
    with torch.no_grad():
        for i in range(len(batch)):
            p, c = int(batch.prompt_lens[i]), int(batch.completion_lens[i])
            ids = batch.input_ids[i:i + 1, :p + c]
            logp = torch.log_softmax(model(ids).logits[0].float() / temperature, -1)
            expected = logp[p - 1:p + c - 1].gather(-1, ids[0, p:p + c, None]).squeeze(-1)
            torch.testing.assert_close(stats.logprobs[i, :c], expected)
            ent = -(logp.exp() * logp).sum(-1)[p - 1:p + c - 1]
            torch.testing.assert_close(stats.entropy[i, :c], ent)


def test_fp32_head_brings_bf16_model_closer_to_fp32_reference():
    batch = batch_of(fake_groups(seed=3))
    args = (batch.input_ids, batch.attention_mask, batch.prompt_lens, batch.completion_lens)
    bf16 = tiny_qwen2(dtype=torch.bfloat16)
    with torch.no_grad():
        # A trained model's logits are O(10); a random init's are O(0.01) and hide head rounding.
        bf16.lm_head.weight.mul_(300.0)
        # reference: the same (bf16-rounded) weights, computed entirely in fp32
        ref = token_stats(copy.deepcopy(bf16).float(), *args).logprobs
        fp32_head = token_stats(bf16, *args, fp32_head=True).logprobs
        bf16_head = token_stats(bf16, *args, fp32_head=False).logprobs
    m = batch.mask.bool()
    err32 = (fp32_head - ref)[m].abs().mean()
    err16 = (bf16_head - ref)[m].abs().mean()
    assert err32 < err16, (float(err32), float(err16))


def test_without_the_fp32_head_autocast_computes_the_head_in_bf16_as_vllm_does(model):
    """DDP on GPU runs the fp32 model under bf16 autocast, and vLLM's bf16 engine computes its
    head in bf16. Qwen2's final RMSNorm multiplies by its fp32 weight, so the hidden states reach
    the head in fp32: `fp32_head: false` must still give the bf16 head's logprobs (here under CPU
    bf16 autocast), not a full fp32 head's."""
    batch = batch_of(fake_groups())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        stats = token_stats(model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                            batch.completion_lens, fp32_head=False)
        hidden = model.model(input_ids=batch.input_ids,
                             attention_mask=batch.attention_mask).last_hidden_state
    assert hidden.dtype == torch.float32  # the final norm's output under autocast
    w = model.lm_head.weight
    bf16 = torch.nn.functional.linear(hidden.bfloat16(), w.bfloat16()).float()  # vLLM's head
    fp32 = torch.nn.functional.linear(hidden, w)
    for i in range(len(batch)):
        p, c = int(batch.prompt_lens[i]), int(batch.completion_lens[i])
        targets = batch.input_ids[i, p:p + c, None]
        expected = torch.log_softmax(bf16[i, p - 1:p + c - 1], -1).gather(-1, targets)
        full = torch.log_softmax(fp32[i, p - 1:p + c - 1], -1).gather(-1, targets)
        torch.testing.assert_close(stats.logprobs[i, :c], expected.squeeze(-1))
        assert (stats.logprobs[i, :c] - full.squeeze(-1)).abs().max() > 1e-4
