"""Advantages: group-centred rewards, then a normalisation chosen from a registry.

`prompt` divides by the std of the prompt's rewards (GRPO), `batch` by the std of all centred
advantages in the batch (ScaleRL, REINFORCE++), `none` keeps the centred value (Dr. GRPO). Stds are
population stds (ddof 0) plus `eps`. Pure tensor functions; rewards come in already mapped (±1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor
NormaliseFn = Callable[[Tensor, Tensor, Tensor, float], Tensor]
NORMALISATIONS: dict[str, NormaliseFn] = {}


def register_normalisation(name: str) -> Callable[[NormaliseFn], NormaliseFn]:
    def deco(fn: NormaliseFn) -> NormaliseFn:
        NORMALISATIONS[name] = fn
        return fn

    return deco


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
def _none(centred: Tensor, group_ids: Tensor, keep: Tensor, eps: float) -> Tensor:
    return centred


@register_normalisation("prompt")
def _prompt(centred: Tensor, group_ids: Tensor, keep: Tensor, eps: float) -> Tensor:
    """A_i / (std_{j in group(i)} r_j + eps); the centred values have the rewards' group std."""
    var = group_mean(centred**2, group_ids)
    return centred / (var.sqrt() + eps)


@register_normalisation("batch")
def _batch(centred: Tensor, group_ids: Tensor, keep: Tensor, eps: float) -> Tensor:
    """A_i / (std of the centred advantages of the rows in `keep` + eps) (J_ScaleRL, ScaleRL §4)."""
    kept = centred[keep]
    std = kept.std(unbiased=False) if kept.numel() else torch.tensor(0.0)
    return centred / (std + eps)


def compute_advantages(rewards: Tensor, group_ids: Tensor, *, normalise: str, eps: float = 1e-6,
                       keep: Tensor | None = None) -> Tensor:
    """Group-centred advantages (B,), normalised by `normalise` (none | prompt | batch).

    `keep` (B,) bool selects the rows whose spread sets the batch std (e.g. the rows left after
    zero-variance filtering); None means every row.
    """
    if normalise not in NORMALISATIONS:
        raise KeyError(
            f"unknown advantage normalisation {normalise!r}; known: "
            f"{', '.join(sorted(NORMALISATIONS))}"
        )
    rewards = rewards.float()
    if keep is None:
        keep = torch.ones_like(rewards, dtype=torch.bool)
    centred = group_centred(rewards, group_ids)
    return NORMALISATIONS[normalise](centred, group_ids, keep, eps)
