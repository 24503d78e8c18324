"""FSDP2 for the policy (`policy.sharding: fsdp2`): the same code on CPU (gloo) and GPU (NCCL).

`shard_policy` calls torch's `fully_shard` on each decoder layer (the model's `_no_split_modules`)
and then on the `PolicyModule`, whose `forward` is the one the trainer calls, so the embeddings,
final norm and LM head are gathered once per forward and the layers one at a time. On GPU the
layers compute in bf16 (parameters all-gathered in bf16, gradients reduced in fp32); the root
keeps its parameters' dtype, so the FP32 LM head stays FP32. `gather_weights` gives rank 0 the
full weights for publishing (in the publisher's form) and for the Hugging Face checkpoint;
`fill_from_rank0` gives every rank its shards of rank 0's weights when only rank 0 loaded them;
`state_bytes_per_param` and `memory_line` state what the trainer holds per parameter.

Accelerate is not used for sharding: 1.15 enables its FSDP plugin only on GPU-like devices (with
`cpu=True` the same config silently runs plain data parallel), so it could not be tested on CPU.
No optimiser step and no checkpoint files here (trainer/checkpoint.py saves the sharded optimizer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from scalerl.trainer.lora import full_weight_bytes, is_lora, published_weights
from scalerl.trainer.policy import hf_model

Tensor = torch.Tensor


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The Hugging Face model's decoder layers: modules of the classes in `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise TypeError(f"{type(model).__name__}: no decoder layers to shard (no modules of "
                        f"_no_split_modules={sorted(names)})")
    return layers


def ensure_process_group(device: torch.device) -> None:
    """A one-process group when none exists (FSDP2 needs one even for a single rank)."""
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def shard_policy(policy: nn.Module, device: torch.device, *, bf16: bool,
                 fp32_head: bool) -> nn.Module:
    """Shard `policy` (a PolicyModule) in place over every rank of the default process group.

    `bf16`: the decoder layers compute in bf16 (and the root too unless `fp32_head`); the
    sharded master weights, gradients and optimizer state stay in the parameters' dtype.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    ensure_process_group(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    low = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layer_policy = low if bf16 else MixedPrecisionPolicy()
    for layer in decoder_layers(hf_model(policy)):
        fully_shard(layer, mesh=mesh, mp_policy=layer_policy)
    fully_shard(policy, mesh=mesh, mp_policy=low if bf16 and not fp32_head
                else MixedPrecisionPolicy())
    return policy


def fill_from_rank0(policy: nn.Module, device: torch.device,
                    full: dict[str, Tensor] | None) -> None:
    """After `shard_policy`: every rank's shards get rank 0's weights, `full` (the Hugging Face
    model's state dict taken on rank 0 before sharding; None on the others). Ranks other than 0
    may have built the model on `meta` (no weights read, no host copy of the whole model): they
    are materialized on `device` first. Rank 0 broadcasts the tensors one by one (torch's
    `set_model_state_dict`, broadcast_from_rank0), then every buffer (non-persistent ones such
    as RoPE's inv_freq are in no state dict). Every rank calls this together."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = hf_model(policy)
    main = dist.get_rank() == 0
    if not main:
        policy.to_empty(device=device)
    set_model_state_dict(model, full if main else {}, options=StateDictOptions(full_state_dict=True,
                                                                broadcast_from_rank0=True))
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


def is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def gather_weights(policy: nn.Module, prepare: Callable[[Tensor], Tensor] | None = None
                   ) -> dict[str, Tensor] | None:
    """Every rank calls this together: the full weights on rank 0 (None on the others), gathered
    one tensor at a time, named as in the checkpoint files (a LoRA policy's adapter alone, under
    PEFT's names: `published_weights`). Rank 0 keeps `prepare(tensor)` of
    each full tensor (a publisher's form: the engine's dtype, cast on the GPU, on a pinned host
    buffer or left on the GPU for NCCL), by default an fp32 CPU copy (the checkpoint's)."""
    main = dist.get_rank() == 0
    keep = prepare or (lambda t: t.to("cpu", copy=True))
    full = {}
    for name, tensor in published_weights(policy):
        if main:
            full[name] = keep(tensor)
    return full if main else None


def state_bytes_per_param(dtype: torch.dtype) -> int:
    """Bytes each parameter holds between steps: weight, gradient and AdamW's two moments, all in
    the weights' dtype (fp32: 16; bf16: 8). Activations and bf16 compute copies come on top."""
    return 4 * dtype.itemsize


def unique_params(model: nn.Module) -> int:
    """Parameters of `model`, a tied tensor counted once (full sizes, also when sharded)."""
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once


def memory_line(policy: nn.Module, world: int, sharded: bool) -> str:
    """One line stating the precision of the trainer's state and its bytes per parameter."""
    if is_lora(hf_model(policy)):
        return lora_memory_line(policy, world, sharded)
    count = unique_params(hf_model(policy))
    dtype = next(hf_model(policy).parameters()).dtype
    per = state_bytes_per_param(dtype)
    total = per * count / 2**30
    name = str(dtype).removeprefix("torch.")
    where = (f"{total / world:.2f} GiB per rank (sharded over {world})" if sharded and world > 1
             else f"{total:.2f} GiB per rank")
    return (f"trainer state: {name} weights, gradients and AdamW moments = {per} B/param x "
            f"{count / 1e9:.3f}B params = {total:.2f} GiB, {where}")


def lora_memory_line(policy: nn.Module, world: int, sharded: bool) -> str:
    """`memory_line` of a LoRA policy: the frozen base holds its weights alone (no gradient, no
    optimizer state); the fp32 adapter its weights, gradients and AdamW's two moments."""
    model = hf_model(policy)
    adapter = sum(p.numel() for p in model.parameters() if p.requires_grad)
    base = full_weight_bytes(model)
    per = state_bytes_per_param(torch.float32)
    total = (base + per * adapter) / 2**30
    split = world if sharded and world > 1 else 1
    return (f"trainer state (LoRA): frozen base {base / 2**30:.2f} GiB (weights only) + fp32 "
            f"adapter {adapter / 1e6:.3f}M params x {per} B/param (weights, gradients, AdamW "
            f"moments) = {total:.2f} GiB, {total / split:.2f} GiB per rank")
