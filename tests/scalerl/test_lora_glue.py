"""The training glue of a LoRA run: its engines serve max_lag + 1 adapters (PipelineRL) or 2
(PPO), set from `policy.lora` whatever the recipe said; a bad target stops the start-up in one
line; a resume reads its checkpoint's adapter and refuses a full fine-tuning checkpoint."""

import pytest
from accelerate import Accelerator

from scalerl.coerce import ConfigError
from scalerl.config import load_config
from scalerl.rollout.lora import LoraServing
from scalerl.training import build_policy, lora_adapter, with_lora_engine


def test_engines_serve_one_adapter_per_live_version():
    full = load_config("tiny-cpu")
    assert with_lora_engine(full) is full and full.engine.lora is None
    cfg = with_lora_engine(load_config("tiny-cpu", ["policy.lora.rank=8",
                                                    "offpolicy.max_lag=3"]))
    assert cfg.engine.lora == LoraServing(rank=8, alpha=16.0, max_loras=4)
    ppo = with_lora_engine(load_config("tiny-cpu", ["policy.lora.rank=8", "policy.lora.alpha=4",
                                                    "offpolicy.mode=ppo"]))
    assert (ppo.engine.lora.max_loras, ppo.engine.lora.alpha) == (2, 4.0)


def test_a_target_the_model_lacks_stops_the_start_in_one_line(tiny_model_path):
    cfg = load_config("tiny-cpu", ["policy.lora.rank=4", "policy.lora.targets=[qkv_proj]"])
    with pytest.raises(ConfigError, match=r"'qkv_proj' matches no linear module .* 'q_proj'"):
        build_policy(cfg.policy, tiny_model_path, Accelerator(cpu=True))


def test_a_resume_reads_the_adapter_of_a_lora_checkpoint_only(tmp_path):
    cfg = load_config("tiny-cpu", ["policy.lora.rank=4"])
    ckpt = tmp_path / "step-000002"
    (ckpt / "adapter").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no adapter/ .* resume it without policy.lora"):
        lora_adapter(cfg, ckpt)
    (ckpt / "adapter" / "adapter_config.json").write_text("{}")
    assert lora_adapter(cfg, ckpt) == ckpt / "adapter"
    assert lora_adapter(cfg, None) is None
    assert lora_adapter(load_config("tiny-cpu"), ckpt) is None


def test_the_tiny_cpu_lora_recipe_is_tiny_cpu_with_lora():
    from dataclasses import replace

    lora, full = load_config("tiny-cpu-lora"), load_config("tiny-cpu")
    assert (lora.policy.lora.rank, lora.policy.lora.scale_alpha, lora.optim.lr) == (16, 32.0,
                                                                                     1e-3)
    assert lora.policy.lora.targets == full.policy.lora.targets
    same = replace(lora, steps=full.steps, policy=full.policy,
                   optim=replace(lora.optim, lr=full.optim.lr))
    assert same == full
