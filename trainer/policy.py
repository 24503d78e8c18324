"""The trained policy: any Hugging Face causal LM, with per-token logprobs and entropy.

Only completion positions go through the LM head, in chunks of tokens (trainer/head.py: the
(tokens, vocabulary) logits are never held at once), and the head can run in FP32 whatever the
model's dtype (the ScaleRL paper's FP32 fix, §3.2: the generator's head must run the same way).
Logprobs are taken at the sampling temperature. Rows come right-padded, or packed end to end
without padding (trainer/packing.py). `named_weights` gives the weights as the
checkpoint files name them (full tensors even when sharded; a tied LM head once, under the
embedding's name). Every tensor made here is placed on the device of the tensors it meets. No
optimiser, no loss here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from scalerl.trainer.head import head_token_stats, match_engine_norm
from scalerl.trainer.packing import PACKED_ATTENTION, Packed, packed_forward, packed_positions

Tensor = torch.Tensor
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TokenStats:
    """Per completion token, shape (B, T): logprob of the taken token and the entropy there."""

    logprobs: Tensor
    entropy: Tensor


def load_policy(path: str, dtype: str = "float32", *, gradient_checkpointing: bool = False,
                attention: str | None = None, meta: bool = False) -> nn.Module:
    """Load a causal LM from a local path or hub name, in `dtype` (float32 | bfloat16 | float16);
    `gradient_checkpointing` recomputes each decoder layer's activations in the backward;
    `attention`: transformers' attn_implementation (None: its default, SDPA); `meta`: built on
    the meta device from its config alone, no weights read (they come from another rank)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"policy dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    extra = {} if attention is None else {"attn_implementation": attention}
    if meta:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path),
                                                     dtype=DTYPES[dtype], **extra)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], **extra)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Keep only each decoder layer's input for the backward and recompute the rest there
    (non-reentrant checkpointing: works under FSDP2 and with inputs that need no gradient)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def _decoder(model: nn.Module) -> nn.Module:
    """The model without its LM head (e.g. Qwen2ForCausalLM.model)."""
    base = getattr(model, model.base_model_prefix, None)
    if base is None:
        raise TypeError(f"{type(model).__name__} has no base model {model.base_model_prefix!r}")
    return base


def completion_positions(prompt_lens: Tensor, completion_lens: Tensor) -> Tensor:
    """(B, T) positions whose hidden state predicts each completion token (clamped padding).

    Row i is laid out as prompt (p_i tokens) then completion; token t of the completion sits at
    p_i + t and is predicted from position p_i + t - 1.
    """
    width = int(completion_lens.max())
    offsets = torch.arange(width, device=prompt_lens.device).unsqueeze(0)  # (1, T)
    positions = prompt_lens.unsqueeze(1) - 1 + offsets
    last = (prompt_lens + completion_lens - 2).clamp(min=0).unsqueeze(1)
    return torch.minimum(positions, last)


def token_stats(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, prompt_lens: Tensor,
                completion_lens: Tensor, *, temperature: float = 1.0, fp32_head: bool = True,
                chunk_tokens: int = 1024, head_operands: str = "float32") -> TokenStats:
    """Logprobs and entropies of the completion tokens of right-padded `input_ids` (B, L).

    The head sees only completion positions, `chunk_tokens` at a time, in FP32 when `fp32_head`;
    logits are divided by `temperature` so logprobs match what the generator sampled from.
    """
    hidden = _decoder(model)(input_ids=input_ids, attention_mask=attention_mask,
                             use_cache=False).last_hidden_state
    positions = completion_positions(prompt_lens, completion_lens)  # (B, T)
    index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
    h = hidden.gather(1, index)  # (B, T, H)
    head = model.get_output_embeddings()
    targets = input_ids.gather(1, (positions + 1).clamp(max=input_ids.shape[1] - 1))
    logprobs, entropy = head_token_stats(h, head.weight, getattr(head, "bias", None), targets,
                                         temperature=temperature, fp32=fp32_head,
                                         chunk=chunk_tokens, operands=DTYPES[head_operands])
    return TokenStats(logprobs=logprobs, entropy=entropy)


def packed_token_stats(model: nn.Module, packed: Packed, prompt_lens: Tensor,
                       completion_lens: Tensor, *, temperature: float = 1.0,
                       fp32_head: bool = True, chunk_tokens: int = 1024,
                       head_operands: str = "float32") -> TokenStats:
    """`token_stats` of rows packed end to end (trainer/packing.py `pack`: (1, N) tokens, their
    position ids and boundaries); the outputs are on the same (B, T) completion grid, 0 past
    each row's completion. The head sees only the real completion tokens (no padded ones)."""
    if model.config._attn_implementation not in PACKED_ATTENTION:
        raise ValueError(f"packed rows need an attention that reads their boundaries "
                         f"({', '.join(PACKED_ATTENTION)}), not "
                         f"{model.config._attn_implementation!r}: call "
                         "trainer.packing.use_varlen_attention(model) first")
    input_ids = packed.input_ids
    with packed_forward():
        hidden = _decoder(model)(input_ids=input_ids, use_cache=False,
                                 **packed.attention_kwargs()).last_hidden_state[0]
    rows, cols, at = packed_positions(prompt_lens, completion_lens)
    head = model.get_output_embeddings()
    logprobs, entropy = head_token_stats(hidden[at], head.weight, getattr(head, "bias", None),
                                         input_ids[0, at + 1], temperature=temperature,
                                         fp32=fp32_head, chunk=chunk_tokens,
                                         operands=DTYPES[head_operands])
    grid = (len(prompt_lens), int(completion_lens.max()))
    zeros = torch.zeros(grid, dtype=logprobs.dtype, device=logprobs.device)
    return TokenStats(logprobs=zeros.index_put((rows, cols), logprobs),
                      entropy=zeros.index_put((rows, cols), entropy))


class PolicyModule(nn.Module):
    """Wraps a causal LM so that one `forward` returns completion logprobs and entropies.

    DDP/FSDP hook into `forward`, so the trainer wraps (or shards) this module, not the bare LM;
    `.model` is the Hugging Face model (saving, weight sync). `chunk_tokens`: completion tokens
    the LM head processes at once; `head_operands`: the FP32 head's operand dtype
    (`policy.head_operands`).
    """

    def __init__(self, model: nn.Module, chunk_tokens: int = 1024,
                 head_operands: str = "float32"):
        super().__init__()
        if head_operands not in DTYPES:
            raise ValueError(f"head_operands {head_operands!r}: one of {', '.join(DTYPES)}")
        self.model = model
        self.chunk_tokens = chunk_tokens
        self.head_operands = head_operands
        if head_operands != "float32":  # the engine's final norm order (trainer/head.py)
            match_engine_norm(model, DTYPES[head_operands])

    def forward(self, input_ids: Tensor | None, attention_mask: Tensor | None,
                prompt_lens: Tensor, completion_lens: Tensor, temperature: float = 1.0,
                fp32_head: bool = True, packed: Packed | None = None) -> tuple[Tensor, Tensor]:
        """Right-padded rows, or packed ones when `packed` is given (then `input_ids` and
        `attention_mask` are None)."""
        if packed is not None:
            stats = packed_token_stats(self.model, packed, prompt_lens,
                                       completion_lens, temperature=temperature,
                                       fp32_head=fp32_head, chunk_tokens=self.chunk_tokens,
                                       head_operands=self.head_operands)
        else:
            stats = token_stats(self.model, input_ids, attention_mask, prompt_lens,
                                completion_lens, temperature=temperature, fp32_head=fp32_head,
                                chunk_tokens=self.chunk_tokens, head_operands=self.head_operands)
        return stats.logprobs, stats.entropy


def hf_model(module: nn.Module) -> nn.Module:
    """The Hugging Face model inside a (possibly unwrapped) PolicyModule."""
    return module.model if isinstance(module, PolicyModule) else module


def saved_names(model: nn.Module) -> list[str]:
    """State-dict names the checkpoint files hold: every parameter once (a tied LM head shares
    the embedding's tensor and is saved, and loaded by vLLM, under the embedding's name) and the
    persistent buffers."""
    names = [name for name, _ in model.named_parameters()]  # duplicates (tied) removed
    for prefix, module in model.named_modules():
        for name in module._buffers:
            if name not in module._non_persistent_buffers_set and module._buffers[name] is not None:
                names.append(f"{prefix}.{name}" if prefix else name)
    return names


def named_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) pairs in Hugging Face naming, detached, for a generator weight update or a
    checkpoint: the names of `saved_names`, full tensors on the model's device.

    Sharded (FSDP2) parameters are gathered one at a time (`full_tensor()`), a collective: every
    rank must iterate this at the same time; only one full tensor is held at once.
    """
    from torch.distributed.tensor import DTensor

    state = hf_model(model).state_dict()
    for name in saved_names(hf_model(model)):
        tensor = state[name]
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        yield name, tensor.detach()
