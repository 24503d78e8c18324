"""LoRA on the trainer (`policy.lora.rank` > 0): PEFT adapters on a frozen base, their tensors
under PEFT's names, and their files in a checkpoint.

`wrap_lora` checks `policy.lora.targets` against the model (one-line errors: a target that
matches no linear module, with the valid names; the LM head, which is refused: see below) and
injects PEFT's LoRA layers (`get_peft_model`) into the Hugging Face model in place, which it
returns: the trainer keeps training that model (the PolicyModule, DDP and FSDP2 wrap it as for
full fine-tuning), its base frozen in the dtype it was loaded in and its adapters fp32 (PEFT's
`autocast_adapter_dtype`; fp32 here whatever the base's). `adapter_weights` gives the adapter's
tensors as PEFT's `get_peft_model_state_dict` names them (what is published and checkpointed);
`load_adapter` reads them back exactly. `full_weight_bytes` is what a full publish of the same
model would move.

The LM head is never adapted: the trainer's chunked FP32 head (trainer/head.py) reads the
head's `weight` directly, outside the module's forward, so an adapter on it would be skipped by
the trainer's logprobs while the engine applied it (a silent mismatch). No optimiser, no
publishing and no engine here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from scalerl.trainer.lora_config import LoraConfig
from scalerl.trainer.policy import hf_model, named_weights

Tensor = torch.Tensor
ADAPTER_DIR = "adapter"
"""A LoRA checkpoint's adapter, in PEFT's layout (rollout/lora.py `write_adapter`)."""
PEFT_PREFIX = "base_model.model."
"""What PEFT's `PeftModel` puts before the Hugging Face model's own parameter names."""
_ADAPTER = "default"
"""PEFT's adapter name inside the model (`get_peft_model_state_dict` drops it)."""


def head_names(model: nn.Module) -> set[str]:
    """Module names of the LM head (the output embeddings), e.g. {"lm_head"}."""
    head = model.get_output_embeddings()
    return {name for name, m in model.named_modules() if head is not None and m is head}


def _matches(name: str, target: str) -> bool:
    """PEFT's rule for a `target_modules` list entry: the whole name or its last parts."""
    return name == target or name.endswith("." + target)


def linear_names(model: nn.Module) -> list[str]:
    """The targets that would be valid: last name parts of the model's linear modules, head
    excluded."""
    heads = head_names(model)
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if isinstance(m, nn.Linear) and n not in heads})


def check_targets(model: nn.Module, lora: LoraConfig) -> None:
    """ValueError (one line) for a target naming the LM head or no linear module of `model`."""
    heads = head_names(model)
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    for target in lora.targets:
        hits = [n for n in linears if _matches(n, target)]
        if any(n in heads for n in hits):
            raise ValueError(f"policy.lora.targets: {target!r} names the LM head, which is not "
                             "adapted (the trainer's FP32 head reads its weight directly, "
                             "trainer/head.py, so an adapter there would be trained on no "
                             "gradient and served by the engine alone); valid targets: "
                             f"{linear_names(model)}")
        if not hits:
            raise ValueError(f"policy.lora.targets: {target!r} matches no linear module of "
                             f"{type(model).__name__}; valid targets: {linear_names(model)}")


def wrap_lora(model: nn.Module, lora: LoraConfig, seed: int = 0) -> nn.Module:
    """Inject LoRA adapters (PEFT, rank `lora.rank`) into `model` in place and return it: every
    base parameter frozen, the adapters trainable and fp32. The adapters start as PEFT starts them
    (A Kaiming-uniform, drawn from `seed` without touching the global RNG; B zero: the wrapped
    model computes exactly the base's outputs, version 0)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    if not lora.enabled:
        raise ValueError("wrap_lora needs policy.lora.rank > 0")
    check_targets(model, lora)
    config = PeftLoraConfig(r=lora.rank, lora_alpha=lora.scale_alpha, lora_dropout=lora.dropout,
                            target_modules=list(lora.targets), bias="none",
                            task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapped = get_peft_model(model, config)
    inner = wrapped.base_model.model  # the same object as `model`, its linears now LoRA layers
    for name, param in inner.named_parameters():
        if _is_adapter(name):
            param.data = param.data.float()
    return inner


def _is_adapter(name: str) -> bool:
    return f".lora_A.{_ADAPTER}." in name or f".lora_B.{_ADAPTER}." in name


def is_lora(model: nn.Module) -> bool:
    """Whether `model` (a Hugging Face model) carries LoRA adapters (`wrap_lora`)."""
    return any(_is_adapter(name) for name, _ in model.named_parameters())


def peft_name(name: str) -> str:
    """PEFT's saved name of adapter parameter `name` (`get_peft_model_state_dict`'s)."""
    return PEFT_PREFIX + name.replace(f".{_ADAPTER}.", ".")


def adapter_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(PEFT name, tensor) of every adapter matrix, detached, on the model's device. Sharded
    (FSDP2) ones are gathered one at a time (`full_tensor()`): every rank iterates together."""
    from torch.distributed.tensor import DTensor

    for name, param in model.named_parameters():
        if _is_adapter(name):
            tensor = param.full_tensor() if isinstance(param, DTensor) else param
            yield peft_name(name), tensor.detach()


def published_weights(policy: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """What a publish or a checkpoint carries of `policy` (a PolicyModule or a Hugging Face
    model): the adapter under PEFT's names when it has one, else every weight (`named_weights`).
    Sharded tensors are gathered one at a time: every rank iterates together."""
    model = hf_model(policy)
    return adapter_weights(model) if is_lora(model) else named_weights(policy)


def load_adapter(model: nn.Module, directory: str | Path) -> None:
    """Copy the adapter saved under `directory` (PEFT's layout) into `model`'s adapters, exactly
    (the same names and shapes, or a one-line ValueError). Before any sharding."""
    from safetensors.torch import load_file

    file = Path(directory) / "adapter_model.safetensors"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no adapter there (a LoRA checkpoint holds "
                                f"{ADAPTER_DIR}/adapter_model.safetensors)")
    saved = load_file(str(file))
    params = {peft_name(n): p for n, p in model.named_parameters() if _is_adapter(n)}
    if set(saved) != set(params):
        missing, extra = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
        raise ValueError(f"{file}: its adapter does not fit policy.lora (missing "
                         f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected "
                         f"{extra[:3]}{'...' if len(extra) > 3 else ''}): resume with the "
                         "run's own policy.lora")
    with torch.no_grad():
        for name, param in params.items():
            if saved[name].shape != param.shape:
                raise ValueError(f"{file}: {name} has shape {tuple(saved[name].shape)}, the "
                                 f"model's is {tuple(param.shape)} (another policy.lora.rank?)")
            param.copy_(saved[name])


def full_weight_bytes(model: nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes a full-weight publish of `model`'s base would move: every base parameter once (a
    tied head once), in `dtype` (None: each parameter's own; integer tensors keep theirs)."""
    total = 0
    for name, param in model.named_parameters():
        if _is_adapter(name):
            continue
        size = dtype.itemsize if dtype is not None and param.is_floating_point() else (
            param.element_size())
        total += param.numel() * size
    return total


def adapter_base(adapter: str | Path) -> str:
    """The base model an adapter directory names (its adapter_config.json)."""
    import json

    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{config}: not an adapter (no adapter_config.json)")
    return json.loads(config.read_text())["base_model_name_or_path"]


def merged_model(adapter: str | Path, base: str | None = None) -> nn.Module:
    """The base model (`base`, else the one the adapter names) with the adapter merged into its
    weights (PEFT `merge_and_unload`): a plain Hugging Face model in the base's own dtype. The
    merge is computed in fp32 (W + alpha/r B A), then cast."""
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    base = base or adapter_base(adapter)
    dtype = getattr(AutoConfig.from_pretrained(base), "dtype", None) or torch.float32
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return merged.to(dtype)
