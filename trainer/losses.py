"""Policy-gradient surrogates (CISPO, GRPO, DAPO, GSPO) and loss aggregations, as pure functions.

Each loss maps per-token tensors of shape (B, T) to a per-token loss (to be minimised) and
per-token statistics; aggregation is a separate registry that turns a completion mask and prompt
ids into per-token weights over the GLOBAL batch, so summing weighted micro-batch losses is exact
under gradient accumulation and DDP. No model, no optimiser, no config objects here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from scalerl.sandbox.registry import Registry

Tensor = torch.Tensor
LossOutput = tuple[Tensor, dict[str, Tensor]]


@dataclass(frozen=True)
class LossSpec:
    """A registered loss: the function and its default hyper-parameters."""

    fn: Callable[..., LossOutput]
    defaults: dict[str, float | bool]


LOSSES: Registry[LossSpec] = Registry("loss")


def register_loss(name: str, **defaults: float | bool) -> Callable:
    def deco(fn: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
        params = set(inspect.signature(fn).parameters)
        unknown = set(defaults) - params
        if unknown:
            raise TypeError(f"loss {name!r}: defaults {sorted(unknown)} are not parameters")
        LOSSES.add(name, LossSpec(fn=fn, defaults=dict(defaults)))
        return fn

    return deco


def get_loss(name: str) -> LossSpec:
    return LOSSES[name]


def loss_kwargs(name: str, overrides: dict[str, float | bool | None]) -> dict[str, float | bool]:
    """The loss's defaults updated with the non-None `overrides` that it accepts."""
    spec = get_loss(name)
    out = dict(spec.defaults)
    out.update({k: v for k, v in overrides.items() if v is not None and k in spec.defaults})
    return out


def _ppo_clip(ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float) -> LossOutput:
    """-min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A) and which entries were clipped."""
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    # A token is clipped when the clipped branch wins and carries no gradient.
    is_clipped = ((ratio > 1.0 + clip_high) & (advantages > 0)) | (
        (ratio < 1.0 - clip_low) & (advantages < 0)
    )
    return per_token, {"clip_frac": is_clipped.float()}


def _ratio_stats(ratio: Tensor) -> dict[str, Tensor]:
    return {"is_ratio": ratio.detach()}


@register_loss("cispo", eps_max=4.0)
def cispo_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
               eps_max: float) -> LossOutput:
    """CISPO (MiniMax-M1; ScaleRL paper Eq. 4 / J_ScaleRL, §4).

    per_token = -sg(min(rho, eps_max)) * A * log pi(y_t), rho = exp(logprobs - old_logprobs).
    `eps_max` is an absolute cap on rho (rho <= 4), with no lower truncation. Shapes: (B, T);
    `advantages` (B, 1). `mask` is unused (token-level loss) but kept for one signature.
    """
    del mask
    ratio = torch.exp(logprobs - old_logprobs)
    weight = torch.clamp(ratio, max=eps_max).detach()
    per_token = -weight * advantages * logprobs
    stats = {"cispo_trunc_frac": (ratio > eps_max).float(), **_ratio_stats(ratio)}
    return per_token, stats


@register_loss("grpo", clip_low=0.2, clip_high=0.2)
def grpo_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
              clip_low: float, clip_high: float) -> LossOutput:
    """PPO-clip surrogate with a symmetric clip (GRPO; ScaleRL paper App. A.2 Eq. 7).

    per_token = -min(rho * A, clip(rho, 1 - eps, 1 + eps) * A), eps = 0.2 by default.
    """
    del mask
    ratio = torch.exp(logprobs - old_logprobs)
    per_token, stats = _ppo_clip(ratio, advantages, clip_low, clip_high)
    return per_token, {**stats, **_ratio_stats(ratio)}


@register_loss("dapo", clip_low=0.2, clip_high=0.28)
def dapo_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
              clip_low: float, clip_high: float) -> LossOutput:
    """PPO-clip with DAPO's asymmetric "clip-higher" bounds (paper A.2 Eq. 8): 0.2 / 0.28."""
    return grpo_loss(logprobs, old_logprobs, advantages, mask,
                     clip_low=clip_low, clip_high=clip_high)


@register_loss("gspo", clip_low=3e-3, clip_high=5e-3, length_norm=True)
def gspo_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
              clip_low: float, clip_high: float, length_norm: bool) -> LossOutput:
    """GSPO: one importance ratio per sequence (ScaleRL §3.2; its best clip 3e-3 / 5e-3).

    s_i = exp(sum_t m_t (logprobs - old_logprobs) / |y_i|) when `length_norm` (the GSPO paper's
    geometric mean), else exp of the plain sum (the ScaleRL paper's formula). The sequence
    surrogate -min(s_i A_i, clip(s_i) A_i) is given to every token of sequence i, so the
    `sample` aggregation recovers GSPO's per-sequence average exactly.
    """
    log_ratio = ((logprobs - old_logprobs) * mask).sum(-1, keepdim=True)  # (B, 1)
    if length_norm:
        log_ratio = log_ratio / mask.sum(-1, keepdim=True).clamp(min=1)
    ratio = torch.exp(log_ratio)
    per_seq, stats = _ppo_clip(ratio, advantages, clip_low, clip_high)
    shape = logprobs.shape
    return per_seq.expand(shape), {
        "clip_frac": stats["clip_frac"].expand(shape),
        "is_ratio": ratio.detach().expand(shape),
    }


# ---------------------------------------------------------------------------------------------
# Aggregation: per-token weights w (B, T) over the global batch; the loss is sum(w * per_token).

AggregationFn = Callable[[Tensor, Tensor], Tensor]
AGGREGATIONS: Registry[AggregationFn] = Registry("aggregation")
register_aggregation = AGGREGATIONS.register


def _per_prompt(values: Tensor, prompt_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(sum of `values` over each row's prompt (B,), number of distinct prompts)."""
    uniq, inverse = torch.unique(prompt_ids, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=values.dtype).index_add_(0, inverse, values)
    return sums[inverse], torch.tensor(float(len(uniq)))


@register_aggregation("token")
def token_weights(mask: Tensor, prompt_ids: Tensor) -> Tensor:
    """L = sum_{i,t} l_it / sum_{i,t} m_it: every trained token in the batch counts the same."""
    del prompt_ids
    return mask / mask.sum().clamp(min=1)


@register_aggregation("sample")
def sample_weights(mask: Tensor, prompt_ids: Tensor) -> Tensor:
    """L = (1/P) sum_p (1/G_p) sum_{i in p} (1/|y_i|) sum_t l_it (GRPO; ScaleRL §3.2)."""
    lengths = mask.sum(-1).clamp(min=1)  # (B,)
    group_size, num_prompts = _per_prompt(torch.ones_like(lengths), prompt_ids)
    return mask / (num_prompts * group_size * lengths).unsqueeze(-1)


@register_aggregation("prompt")
def prompt_weights(mask: Tensor, prompt_ids: Tensor) -> Tensor:
    """L = (1/P) sum_p (1/sum_{g in p} |y_g|) sum_{i in p} sum_t l_it (ScaleRL §3.2)."""
    prompt_tokens, num_prompts = _per_prompt(mask.sum(-1), prompt_ids)
    return mask / (num_prompts * prompt_tokens.clamp(min=1)).unsqueeze(-1)


def aggregation_weights(how: str, mask: Tensor, prompt_ids: Tensor) -> Tensor:
    """Per-token weights (B, T) of aggregation `how`, computed over the whole (global) batch."""
    return AGGREGATIONS[how](mask.float(), prompt_ids)


def aggregate(per_token: Tensor, weights: Tensor) -> Tensor:
    """The scalar loss: sum(w * l). Summing this over micro-batches/ranks gives the batch loss."""
    return (per_token * weights).sum()
