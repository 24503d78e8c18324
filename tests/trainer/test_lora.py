"""LoRA on the trainer (trainer/lora.py): PEFT adapters injected into a tiny random Qwen2, checked
targets, PEFT's names (against PEFT's own `get_peft_model_state_dict`), version 0 = the base,
an adapter written and read back exactly, the bytes of a full publish counted by hand, and a
LoRA checkpoint that holds the adapter alone."""

import json

import pytest
import torch
from conftest import VOCAB, tiny_qwen2

from scalerl.trainer.checkpoint import is_lora_checkpoint, load_state, save_checkpoint
from scalerl.trainer.config import PolicyConfig, TrainerConfig
from scalerl.trainer.lora import (
    adapter_weights,
    full_weight_bytes,
    is_lora,
    load_adapter,
    published_weights,
    wrap_lora,
)
from scalerl.trainer.lora_config import LoraConfig
from scalerl.trainer.policy import PolicyModule
from scalerl.trainer.sharding import memory_line

LORA = LoraConfig(rank=4, alpha=8.0)
VALID = "['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj']"


def test_base_frozen_adapter_fp32_and_version_0_is_the_base():
    base = tiny_qwen2(seed=3, dtype=torch.bfloat16)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    expected = base(ids).logits.clone()
    model = wrap_lora(base, LORA)
    assert is_lora(model) and not is_lora(tiny_qwen2())
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n and p.dtype == torch.float32
                             for n, p in trainable.items())
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    assert model.get_output_embeddings().weight.requires_grad is False
    # 7 targets x 2 layers, rank 4: A (4 x in) + B (out x 4); q, k, v, o are 64 -> 64, gate and
    # up 64 -> 128, down 128 -> 64
    per_layer = 4 * (4 * 64 + 64 * 4) + 2 * (4 * 64 + 128 * 4) + (4 * 128 + 64 * 4)
    assert sum(p.numel() for p in trainable.values()) == 2 * per_layer
    torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)  # B = 0


def test_adapter_names_and_values_are_pefts_own():
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model
    from peft.utils import get_peft_model_state_dict

    ours = wrap_lora(tiny_qwen2(seed=3), LORA, seed=11)
    base = tiny_qwen2(seed=3)
    torch.manual_seed(11)  # the draw of A's initial values
    reference = get_peft_model(base, PeftLoraConfig(
        r=4, lora_alpha=8.0, target_modules=list(LORA.targets), task_type="CAUSAL_LM"))
    expected = get_peft_model_state_dict(reference)
    got = dict(adapter_weights(ours))
    assert sorted(got) == sorted(expected) and len(got) == 2 * 7 * 2
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    assert dict(published_weights(PolicyModule(ours))).keys() == expected.keys()


@pytest.mark.parametrize("target, says", [
    ("qproj", f"'qproj' matches no linear module of Qwen2ForCausalLM; valid targets: {VALID}"),
    ("embed_tokens", "'embed_tokens' matches no linear module"),
    ("lm_head", "'lm_head' names the LM head, which is not adapted"),
])
def test_bad_targets_are_refused_in_one_line(target, says):
    with pytest.raises(ValueError, match="policy.lora.targets") as err:
        wrap_lora(tiny_qwen2(), LoraConfig(rank=4, targets=("q_proj", target)))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_adapter_written_reads_back_exactly(tmp_path):
    from scalerl.rollout.lora import write_adapter

    trained = wrap_lora(tiny_qwen2(seed=3), LORA, seed=0)
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p))
    write_adapter(adapter_weights(trained), LORA.serving(2), "base", tmp_path)
    fresh = wrap_lora(tiny_qwen2(seed=3), LORA, seed=1)
    load_adapter(fresh, tmp_path)
    ids = torch.tensor([[3, 4, 5, 6]])
    torch.testing.assert_close(fresh(ids).logits, trained(ids).logits, rtol=0, atol=0)
    other = wrap_lora(tiny_qwen2(seed=3), LoraConfig(rank=8), seed=0)
    with pytest.raises(ValueError, match=r"has shape \(4, 64\), the model.s is \(8, 64\)"):
        load_adapter(other, tmp_path)
    fewer = wrap_lora(tiny_qwen2(seed=3), LoraConfig(rank=4, targets=("q_proj",)), seed=0)
    with pytest.raises(ValueError, match="does not fit policy.lora"):
        load_adapter(fewer, tmp_path)


def test_full_weight_bytes_counted_by_hand():
    model = wrap_lora(tiny_qwen2(seed=3), LORA)
    # embeddings and head 48 x 64 each; a layer: q, k, v 64x64 + bias 64, o 64x64, gate, up,
    # down 64x128, two norms of 64; the final norm 64
    layer = 3 * (64 * 64 + 64) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    params = 2 * VOCAB * 64 + 2 * layer + 64
    assert full_weight_bytes(model) == 4 * params
    assert full_weight_bytes(model, torch.bfloat16) == 2 * params


def test_memory_line_counts_the_frozen_base_and_the_adapter():
    line = memory_line(PolicyModule(wrap_lora(tiny_qwen2(), LORA)), world=1, sharded=False)
    assert line.startswith("trainer state (LoRA): frozen base")
    assert "adapter 0.009M params x 16 B/param" in line  # 2 layers x 4352 (counted above)


def test_lora_keeps_a_bf16_base_whatever_the_lr():
    with pytest.raises(ValueError, match="lose every AdamW update"):
        TrainerConfig(policy=PolicyConfig(dtype="bfloat16"), optim=_optim(1e-7))
    TrainerConfig(policy=PolicyConfig(dtype="bfloat16", lora=LORA), optim=_optim(1e-7))


def _optim(lr):
    from scalerl.trainer.config import OptimConfig

    return OptimConfig(lr=lr)


def test_a_lora_checkpoint_holds_the_adapter_alone(tmp_path):
    model = wrap_lora(tiny_qwen2(seed=3), LORA)
    model.name_or_path = "/models/base"
    path = save_checkpoint(tmp_path, 3, model, None, {"optimizer": {"x": 1}},
                           lora=LORA.serving(9))
    assert sorted(p.name for p in path.iterdir()) == ["adapter", "trainer_state.pt"]
    assert is_lora_checkpoint(path)
    config = json.loads((path / "adapter" / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["r"], config["lora_alpha"]) == (
        "/models/base", 4, 8.0)
    assert load_state(path)["step"] == 3
    fresh = wrap_lora(tiny_qwen2(seed=3), LORA, seed=5)
    load_adapter(fresh, path / "adapter")
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(adapter_weights(fresh),
                                                           adapter_weights(model), strict=True))


def test_a_frozen_head_gets_no_weight_gradient_and_the_same_hidden_gradient():
    from scalerl.trainer.head import head_token_stats

    torch.manual_seed(0)
    h0, targets = torch.randn(6, 16), torch.randint(0, 40, (6,))
    weight = torch.randn(40, 16)
    grads = []
    for trains in (True, False):
        h, w = h0.clone().requires_grad_(), weight.clone().requires_grad_(trains)
        logprobs, _ = head_token_stats(h, w, None, targets, chunk=4)
        logprobs.sum().backward()
        grads.append(h.grad)
        assert (w.grad is not None) == trains
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
