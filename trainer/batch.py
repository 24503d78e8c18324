"""From scored groups of rollouts to the padded tensors one optimizer step trains on.

`prepare_groups` leaves out `error` verdicts (a group with fewer than 2 rollouts left is
dropped), then applies the truncation policy, maps each verdict to its reward once
(trainer/rewards.py), then zero-variance filtering and the prompt-retirement bookkeeping;
`collate` computes advantages and the aggregation weights over the WHOLE global batch and pads
everything, so any split into micro-batches or ranks (`TrainBatch.select`) trains on exactly the
same loss. Rows come out shortest first, so micro-batches of consecutive rows pad little. No
model and no optimiser here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from scalerl.trainer.advantages import compute_advantages
from scalerl.trainer.columns import Columns, padded
from scalerl.trainer.filters import (
    Group,
    PromptRetirement,
    apply_truncation,
    drop_errors,
    is_zero_variance,
    pass_rate,
)
from scalerl.trainer.losses import aggregation_weights
from scalerl.trainer.rewards import RewardMap, rewards_of

Tensor = torch.Tensor


@dataclass(frozen=True)
class TrainBatch:
    """Padded tensors of B completions; (B, L) for inputs, (B, T) for completion tokens."""

    input_ids: Tensor
    attention_mask: Tensor
    prompt_lens: Tensor
    completion_lens: Tensor
    old_logprobs: Tensor
    """Generator logprobs; 0 where forced or padding (masked out)."""
    mask: Tensor
    """1 for sampled completion tokens, 0 for forced (interruption) tokens and padding."""
    advantages: Tensor
    """(B, 1)"""
    weights: Tensor
    """Aggregation weights over the global batch: the loss is sum(weights * per_token)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: Tensor) -> TrainBatch:
        """The rows `rows` (1-D index), trimmed to their own longest sequence."""
        parts = {f.name: getattr(self, f.name)[rows] for f in fields(self)}
        seq = int((parts["prompt_lens"] + parts["completion_lens"]).max())
        width = int(parts["completion_lens"].max())
        for name in ("input_ids", "attention_mask"):
            parts[name] = parts[name][:, :seq]
        for name in ("old_logprobs", "mask", "weights"):
            parts[name] = parts[name][:, :width]
        return TrainBatch(**parts)

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())


@dataclass(frozen=True)
class GroupReport:
    """What filtering did to one step's groups (for metrics)."""

    groups_in: int
    zero_variance: int
    retired: int
    truncated_dropped: int
    zero_variance_rollouts: int = 0
    """Rollouts in the dropped zero-variance groups (for advantages.std_scope = all)."""
    rollouts_in: int = 0
    error_excluded: int = 0
    """Rollouts left out because their verdict was `error` (never trained on)."""
    error_groups_dropped: int = 0
    """Groups dropped because fewer than 2 rollouts were left once errors were left out."""
    rewarded: tuple[Group, ...] = ()
    """Every group that got rewards (after errors and the truncation policy, before zero-variance
    filtering), each rollout carrying the reward it trains with: what `reward/*` logs."""

    @property
    def error_excluded_frac(self) -> float:
        return self.error_excluded / max(self.rollouts_in, 1)


def prepare_groups(groups: list[Group], *, truncation: str, rewards: RewardMap,
                   zero_variance_filter: bool,
                   retirement: PromptRetirement) -> tuple[list[Group], GroupReport]:
    """Errors out, then the truncation policy, the rewards, NPR bookkeeping and zero-variance
    filtering (no refilling). A group's baseline and the batch std come from its non-error
    rollouts only; the kept groups' rollouts carry their rewards."""
    kept, rewarded, zero_var, retired, dropped, zero_rows = [], [], 0, 0, 0, 0
    errors, error_groups = 0, 0
    for group in groups:
        scored = drop_errors(group)
        errors += len(group) - len(scored)
        if len(scored) < min(2, len(group)):  # too few left to centre on
            error_groups += 1
            continue
        trimmed = apply_truncation(scored, truncation)
        dropped += len(scored) - len(trimmed)
        if not trimmed:
            continue
        trimmed = rewards.assign(trimmed)
        rewarded.append(trimmed)
        first = trimmed[0]
        retired += retirement.observe(f"{first.task}/{first.sample_id}", pass_rate(trimmed))
        if zero_variance_filter and is_zero_variance(rewards_of(trimmed)):
            zero_var += 1
            zero_rows += len(trimmed)
            continue
        kept.append(trimmed)
    report = GroupReport(len(groups), zero_var, retired, dropped, zero_rows,
                         rollouts_in=sum(len(g) for g in groups), error_excluded=errors,
                         error_groups_dropped=error_groups, rewarded=tuple(rewarded))
    return kept, report


def collate(groups: list[Group], *, normalise: str, aggregation: str, pad_id: int,
            eps: float = 1e-6, zero_rows: int = 0) -> TrainBatch:
    """Advantages (from the rewards `prepare_groups` assigned) and aggregation weights over all
    `groups`, then right-padded tensors.

    `zero_rows` counts rollouts of filtered zero-variance groups: their (zero) centred
    advantages join the batch std (advantages.std_scope = all) but are not trained on.
    Rows are sorted by sequence length (stable): the step's micro-batches are runs of
    consecutive rows, each trimmed to its own longest sequence, so mixed-length tasks stop
    paying for the longest row everywhere (docs/measurements.md has the tiny-cpu figures). The
    loss is a weighted sum over rows, so the order changes nothing else.
    """
    rollouts = [r for g in groups for r in g]
    if not rollouts:
        raise ValueError("collate: no rollouts left to train on")
    group_ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    rewards = torch.tensor([x for g in groups for x in rewards_of(g)])
    pad_groups = torch.arange(len(groups), len(groups) + zero_rows)  # one alike row each
    advantages = compute_advantages(torch.cat([rewards, torch.zeros(zero_rows)]),
                                    torch.cat([group_ids, pad_groups]), normalise=normalise,
                                    eps=eps)[:len(rollouts)]
    cols = Columns.of(rollouts)  # flat arrays, padded with vectorised copies (trainer/columns.py)
    seqs, seq_lens = cols.sequences()
    clens = cols.completion_lens
    mask = padded((~cols.forced).astype(np.float32), clens, 0.0, torch.float32)
    batch = TrainBatch(
        input_ids=padded(seqs, seq_lens, pad_id, torch.long),
        attention_mask=padded(np.ones(len(seqs), dtype=np.int64), seq_lens, 0, torch.long),
        prompt_lens=torch.from_numpy(cols.prompt_lens.copy()),
        completion_lens=torch.from_numpy(np.maximum(clens, 1)),
        old_logprobs=padded(cols.logprobs, clens, 0.0, torch.float32), mask=mask,
        advantages=advantages.unsqueeze(-1),
        weights=aggregation_weights(aggregation, mask, group_ids),
    )
    return batch.select(torch.argsort(torch.from_numpy(seq_lens), stable=True))
