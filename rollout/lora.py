"""LoRA serving: what an engine needs to serve a run's adapters, and the adapter files it reads.

A LoRA run (`policy.lora` on the trainer) publishes only its adapter. Every published weight
version is one adapter, named `adapter_name(version)` with vLLM's integer id `adapter_id(version)`,
written in PEFT's own layout (`adapter_config.json` + `adapter_model.safetensors`, the layout both
vLLM's in-process `LoRARequest` and a server's `/v1/load_lora_adapter` read). The engine keeps at
least `max_loras` of them loaded (>= the run's `max_lag` + 1), so a rollout finishes under the
adapter it started with and every token's policy version stays exact; a new name per version also
keys vLLM's prefix cache apart (a same-name swap could reuse stale KV). Tensor names are PEFT's
(`get_peft_model_state_dict`: `base_model.model.<module>.lora_A.weight`). No engine is started and
no adapter is trained here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                    "up_proj", "down_proj")
"""The attention and MLP projections of Llama/Qwen-style decoders (PEFT `target_modules` names)."""

VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM 0.32 accepts for `max_lora_rank` (vllm/config/lora.py `MaxLoRARanks`)."""


@dataclass(frozen=True)
class LoraServing:
    """How an engine serves a LoRA run's adapters: their shape and how many stay loaded."""

    rank: int
    """The adapters' rank r (PEFT `r`); the engine's `max_lora_rank` is the smallest vLLM rank
    >= r (`serving_rank`)."""
    alpha: float
    """PEFT `lora_alpha` (the update is scaled by alpha / r)."""
    targets: tuple[str, ...] = DEFAULT_TARGETS
    """PEFT `target_modules`: module names whose linear layers carry an adapter."""
    max_loras: int = 2
    """Adapters loaded at once (vLLM `max_loras`); a run sets it to `max_lag` + 1 at least."""

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoraServing.rank must be an integer >= 1, got {self.rank!r}")
        if self.rank > VLLM_LORA_RANKS[-1]:
            raise ValueError(f"LoRA rank {self.rank} is more than vLLM serves (at most "
                             f"{VLLM_LORA_RANKS[-1]})")
        if self.alpha <= 0:
            raise ValueError(f"LoraServing.alpha must be > 0, got {self.alpha!r}")
        if not self.targets:
            raise ValueError("LoraServing.targets is empty; name modules, e.g. "
                             f"{list(DEFAULT_TARGETS)}")
        if self.max_loras < 1:
            raise ValueError(f"LoraServing.max_loras must be >= 1, got {self.max_loras!r}")

    @property
    def serving_rank(self) -> int:
        """vLLM's `max_lora_rank` for these adapters: the smallest rank it accepts >= `rank`."""
        return next(r for r in VLLM_LORA_RANKS if r >= self.rank)

    def adapter_config(self, base_model: str) -> dict:
        """PEFT's `adapter_config.json` for one published adapter of `base_model`."""
        return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path":
                base_model, "r": self.rank, "lora_alpha": self.alpha, "lora_dropout": 0.0,
                "target_modules": sorted(self.targets), "bias": "none",
                "fan_in_fan_out": False, "modules_to_save": None, "use_rslora": False,
                "use_dora": False, "inference_mode": True}


def adapter_name(version: int) -> str:
    """The adapter name of weight version `version` (a request names it to sample under it)."""
    return f"scalerl-v{version}"


def adapter_id(version: int) -> int:
    """vLLM's integer id of version `version`'s adapter (`LoRARequest.lora_int_id`, >= 1)."""
    return version + 1


def write_adapter(named_tensors: Iterable, serving: LoraServing, base_model: str,
                  directory: str | Path) -> tuple[Path, int]:
    """Write one adapter in PEFT's layout under `directory`; returns (the directory, the bytes of
    its tensors). `named_tensors`: (PEFT name, tensor) pairs, e.g. `get_peft_model_state_dict`'s
    items."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in named_tensors}
    if not tensors:
        raise ValueError(f"no adapter tensors to write to {out}")
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps(serving.adapter_config(base_model),
                                                        indent=1))
    return out, sum(t.numel() * t.element_size() for t in tensors.values())
