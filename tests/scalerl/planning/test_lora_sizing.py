"""LoRA in the dry run (scalerl/planning/lora_sizing.py): the adapter of Qwen3-8B at rank 32 on
the default targets counted by hand, a trainer rank's frozen base and fp32 adapter state, the
engine's LoRA slots as vLLM 0.32 allocates them, the bytes of a publish, and the recipe's dry run
with `policy.lora.rank=32` on 8 x H100 (it fits, publishes megabytes and picks its own split)."""

from __future__ import annotations

import dataclasses

import pytest
from published_configs import QWEN3_8B, QWEN3_8B_PARAMS, write_config

from scalerl.config import load_config
from scalerl.planning.dry_run import describe, plan_run
from scalerl.planning.lora_sizing import adapter_params, engine_lora_memory, publish_line
from scalerl.planning.sizing import GIB, ModelShape, TrainerLayout, trainer_memory
from scalerl.rollout.lora import DEFAULT_TARGETS, LoraServing

SHAPE = ModelShape(params=QWEN3_8B_PARAMS, layers=36, hidden=4096, intermediate=12288, heads=32,
                   kv_heads=8, head_dim=128, vocab=151936, tied=False, qk_norm=True)
"""Qwen3-8B's config.json: 36 layers, hidden 4096, 32 query heads and 8 key/value heads of 128,
MLP 12288."""
ADAPTER_R32 = 87_293_952
"""By hand, r = 32, r x (in + out) per projection of a layer:
q_proj 4096 -> 32 x 128 = 4096:     32 x (4096 + 4096)  =   262,144
k_proj 4096 ->  8 x 128 = 1024:     32 x (4096 + 1024)  =   163,840
v_proj the same:                                            163,840
o_proj 4096 -> 4096:                32 x (4096 + 4096)  =   262,144
gate_proj 4096 -> 12288:            32 x (4096 + 12288) =   524,288
up_proj the same:                                           524,288
down_proj 12288 -> 4096:            32 x (12288 + 4096) =   524,288
a layer: 2 x 262,144 + 2 x 163,840 + 3 x 524,288 = 2,424,832; x 36 layers = 87,293,952."""


def test_the_adapter_of_qwen3_8b_at_rank_32_by_hand():
    assert adapter_params(SHAPE, 32, DEFAULT_TARGETS) == ADAPTER_R32
    assert adapter_params(SHAPE, 8, ("q_proj", "v_proj")) == 36 * 8 * (8192 + 5120)
    assert adapter_params(SHAPE, 1, ("lm_head",)) == 4096 + 151936  # once, not per layer
    with pytest.raises(ValueError, match=r"policy.lora.targets \['qkv'\]"):
        adapter_params(SHAPE, 8, ("qkv",))


def test_a_lora_rank_holds_a_frozen_bf16_base_and_the_fp32_adapter_state():
    full = TrainerLayout(ranks=4, sharded=True, dtype="auto", fp32_head=True,
                         checkpointing=True, micro_tokens=16384, logit_chunk_tokens=1024,
                         head_operands="bfloat16")
    lora = dataclasses.replace(full, lora_rank=32, lora_targets=DEFAULT_TARGETS)
    f, m = trainer_memory(SHAPE, full), trainer_memory(SHAPE, lora)
    assert m["weights"] == 2 * QWEN3_8B_PARAMS // 4  # bf16 frozen base over 4 ranks
    assert (m["adapter"], m["gradients"], m["optimizer"]) == (
        4 * ADAPTER_R32 // 4, 4 * ADAPTER_R32 // 4, 8 * ADAPTER_R32 // 4)
    assert m["publish_staging"] == ADAPTER_R32 * (4 + 2)  # fp32 gathered, its bf16 cast
    assert m["head_copies"] == m["head_fallback"] == 0  # bf16 operands of a bf16 frozen head
    assert m["activations"] == f["activations"] and m["logits"] == f["logits"]
    assert m["adapter_xa"] == 16384 * 1 * 32 * 2 * 7  # the recomputed layer's x @ A, bf16
    assert sum(m.values()) < sum(f.values()) / 2


def test_the_engine_s_lora_slots_as_vllm_allocates_them():
    serving = LoraServing(rank=32, alpha=64.0, max_loras=9)
    one = engine_lora_memory(SHAPE, serving, dtype="bfloat16", tp=1, max_tokens=16384)
    assert one["lora_slots"] == 9 * 36 * 2_424_832 * 2  # max_loras x layers x r(in+out) x bf16
    # TP 2: column layers (q, k, v, gate, up) split out, row layers (o, down) split in:
    # 32 x [(4096+2048) + 2 x (4096+512) + (2048+4096) + 2 x (4096+6144) + (6144+4096)]
    two = engine_lora_memory(SHAPE, serving, dtype="bfloat16", tp=2, max_tokens=16384)
    assert two["lora_slots"] == 9 * 36 * 1_671_168 * 2
    assert one["lora_buffers"] == 4 * 8 * 16384 + 3 * 16384 * 32 * 4
    odd = LoraServing(rank=20, alpha=40.0, max_loras=1)  # served at vLLM's next rank, 32
    assert engine_lora_memory(SHAPE, odd, dtype="bfloat16", max_tokens=1)["lora_slots"] == \
        36 * 2_424_832 * 2


def test_the_recipe_dry_run_with_lora_on_eight_h100s(tmp_path):
    model = write_config(tmp_path, QWEN3_8B)
    gpu = dict(gpus=8, gpu_bytes=int(81559 / 1024 * GIB), gpu_name="H100-SXM")
    full = plan_run(load_config("scalerl", [f"policy.model={model}"]), str(tmp_path), **gpu)
    lora = plan_run(load_config("scalerl", [f"policy.model={model}", "policy.lora.rank=32"]),
                    str(tmp_path), **gpu)
    assert not lora.refusal
    assert lora.publish_bytes == 2 * ADAPTER_R32 and full.publish_bytes == 2 * QWEN3_8B_PARAMS
    assert lora.engine["lora_slots"] == 9 * 2 * ADAPTER_R32  # max_lag 8 + 1 adapters
    assert sum(lora.trainer.values()) < sum(full.trainer.values()) / 2
    assert lora.speed.plan.publish_s < full.speed.plan.publish_s / 5
    assert lora.ranks != full.ranks  # a lighter, faster trainer: the model moves the split
    assert publish_line(lora.publish_bytes, lora.shape, lora.layout) in describe(lora)
    assert "166.5 MiB" in publish_line(lora.publish_bytes, lora.shape, lora.layout)
