"""The trained policy: any Hugging Face causal LM, with per-token logprobs and entropy.

Only completion positions go through the LM head, and the head can run in FP32 whatever the
model's dtype (the ScaleRL paper's FP32 fix, §3.2: the generator's head must run the same way).
Logprobs are taken at the sampling temperature. No optimiser, no loss here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Tensor = torch.Tensor
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TokenStats:
    """Per completion token, shape (B, T): logprob of the taken token and the entropy there."""

    logprobs: Tensor
    entropy: Tensor


def load_policy(path: str, dtype: str = "float32") -> nn.Module:
    """Load a causal LM from a local path or hub name, in `dtype` (float32 | bfloat16 | float16)."""
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"policy dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])


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
    offsets = torch.arange(width).unsqueeze(0)  # (1, T)
    positions = prompt_lens.unsqueeze(1) - 1 + offsets
    last = (prompt_lens + completion_lens - 2).clamp(min=0).unsqueeze(1)
    return torch.minimum(positions, last)


def token_stats(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, prompt_lens: Tensor,
                completion_lens: Tensor, *, temperature: float = 1.0,
                fp32_head: bool = True) -> TokenStats:
    """Logprobs and entropies of the completion tokens of right-padded `input_ids` (B, L).

    The head sees only completion positions, in FP32 when `fp32_head`; logits are divided by
    `temperature` so logprobs match what the generator sampled from.
    """
    hidden = _decoder(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    positions = completion_positions(prompt_lens, completion_lens)  # (B, T)
    index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
    h = hidden.gather(1, index)  # (B, T, H)
    head = model.get_output_embeddings()
    weight, bias = head.weight, getattr(head, "bias", None)
    if fp32_head:
        # Under bf16 autocast a Linear runs in bf16 whatever its inputs: switch it off here.
        with torch.autocast(device_type=h.device.type, enabled=False):
            logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float())
    else:
        logits = F.linear(h, weight, bias)
    logits = logits.float() / temperature  # (B, T, V)
    logp_all = torch.log_softmax(logits, dim=-1)
    targets = input_ids.gather(1, (positions + 1).clamp(max=input_ids.shape[1] - 1))
    logprobs = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return TokenStats(logprobs=logprobs, entropy=entropy.detach())


class PolicyModule(nn.Module):
    """Wraps a causal LM so that one `forward` returns completion logprobs and entropies.

    DDP/FSDP hook into `forward`, so the trainer wraps this module (not the bare LM) with
    Accelerate; `.model` is the Hugging Face model (saving, weight sync).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, prompt_lens: Tensor,
                completion_lens: Tensor, temperature: float = 1.0,
                fp32_head: bool = True) -> tuple[Tensor, Tensor]:
        stats = token_stats(self.model, input_ids, attention_mask, prompt_lens, completion_lens,
                            temperature=temperature, fp32_head=fp32_head)
        return stats.logprobs, stats.entropy


def hf_model(module: nn.Module) -> nn.Module:
    """The Hugging Face model inside a (possibly unwrapped) PolicyModule."""
    return module.model if isinstance(module, PolicyModule) else module


def named_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) pairs in Hugging Face naming, detached, for a generator weight update."""
    for name, tensor in hf_model(model).state_dict().items():
        yield name, tensor.detach()
