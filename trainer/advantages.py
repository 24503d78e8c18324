"""Advantages: group-centred rewards, then a normalisation chosen from a registry.

`prompt` divides by the std of the prompt's rewards (GRPO), `batch` by the std of all centred
advantages in the batch (ScaleRL, REINFORCE++), `none` keeps the centred value (Dr. GRPO). Stds are
population stds (ddof 0) plus `eps`. Pure tensor functions; rewards come in already mapped (±1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from scalerl.sandbox.registry import Registry

Tensor = torch.Tensor
NormaliseFn = Callable[[Tensor, Tensor, float], Tensor]
NORMALISATIONS: Registry[NormaliseFn] = Registry("advantage normalisation")
register_normalisation = NORMALISATIONS.register


def group_mean(values: Tensor, group_ids: Tensor) -> Tensor:
    """Mean of `values` (B,) over each row's group, broadcast back to (B,)."""
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=values.dtype).index_add_(0, inverse, values)
    counts = torch.zeros(len(uniq), dtype=values.dtype).index_add_(0, inverse,
                                                                   torch.ones_like(values))
    return (sums / counts)[inverse]


def group_centred(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """A_i = r_i - mean_{j in group(i)} r_j (ScaleRL §2)."""
    return rewards - group_mean(rewards, group_ids)


@register_normalisation("none")
def _none(centred: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    return centred


@register_normalisation("prompt")
def _prompt(centred: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """A_i / (std_{j in group(i)} r_j + eps); the centred values have the rewards' group std."""
    var = group_mean(centred**2, group_ids)
    return centred / (var.sqrt() + eps)


@register_normalisation("batch")
def _batch(centred: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """A_i / (std of all the batch's centred advantages + eps) (J_ScaleRL, ScaleRL §4)."""
    return centred / (centred.std(unbiased=False) + eps)


def compute_advantages(rewards: Tensor, group_ids: Tensor, *, normalise: str,
                       eps: float = 1e-6) -> Tensor:
    """Group-centred advantages (B,), normalised by `normalise` (a registered normalisation:
    none | prompt | batch). The rows whose spread sets the batch std are the rows given (the
    trainer adds the filtered zero-variance rows as zeros for `advantages.std_scope: all`)."""
    normalise_fn = NORMALISATIONS[normalise]
    centred = group_centred(rewards.float(), group_ids)
    return normalise_fn(centred, group_ids, eps)
