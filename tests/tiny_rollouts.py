"""What the real-engine and real-server rollout tests share: the tiny model's checkpoint, arith's
test samples, and the check of a weight update that lands while rollouts run.

The update check relies on a zero LM head: its logits are uniform, so every token sampled under
it has logprob exactly -log V (and EOS comes 1 in V, so rollouts under it run on to their budgets
and an update lands while they run).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_task
from scalerl.rollout.types import Rollout


def arith(limit: int) -> list[Sample]:
    return list(get_task("arith").samples("test"))[:limit]


def checkpoint(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint in directory `path`, by name."""
    from safetensors.torch import load_file

    weights = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    return weights


def zero_head(base: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    return [("lm_head.weight", torch.zeros_like(base["lm_head.weight"]))]


def uniform_logprob(base: dict[str, torch.Tensor]) -> float:
    return -math.log(base["lm_head.weight"].shape[0])


def straddlers(results: list[Rollout], zero: int, new: int, uniform: float) -> list[Rollout]:
    """The rollouts with tokens of both versions `zero` (a zero head's) and `new`, after
    checking that the labels switch exactly where the weights did: versions never go back, every
    token labelled `zero` is at `uniform` (a label switching late fails) and each straddler's
    first sampled token labelled `new` is not (a label switching early fails)."""
    for r in results:
        assert list(r.versions) == sorted(r.versions), list(r.versions)
        for lp, version in zip(r.logprobs, r.versions, strict=True):
            if lp is not None and version == zero:
                assert lp == pytest.approx(uniform, abs=2e-6)
    both = [r for r in results if r.min_version == zero and r.max_version == new]
    for r in both:
        first_new = next(lp for lp, version in zip(r.logprobs, r.versions, strict=True)
                         if lp is not None and version == new)
        assert abs(first_new - uniform) > 1e-5, list(r.versions)
    return both
