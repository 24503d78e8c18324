"""Micro-batches by tokens (`offpolicy.micro_batch_tokens`), packed without padding.

`token_micro_batches` cuts each rank's rows of the global batch into runs of consecutive rows
whose sequences (prompt + completion) add up to at most `max_tokens` (a longer row gets a run of
its own), the same number of runs on every rank. `pack` lays a run's rows end to end in one row
of `sum(lengths)` tokens with position ids restarting at 0 for each, so transformers attends
within each row only: through a block-diagonal causal mask with sdpa/eager (CPU), through
varlen flash attention (`cu_seqlens` from the position ids) with `flash_attention_2` on GPU;
no (rows, L, L) padding mask, no padded tokens. `packed_positions` says where each completion
token is predicted in the packed row. The loss is unchanged: its aggregation weights are global
(trainer/batch.py), so any split sums to the same step. No model and no loss here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Tensor = torch.Tensor


def _runs(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices into `lengths`, cut greedily in order into runs of at most `max_tokens`."""
    runs: list[list[int]] = []
    total = 0
    for i, n in enumerate(lengths):
        if runs and total + n <= max_tokens:
            runs[-1].append(i)
            total += n
        else:
            runs.append([i])
            total = n
    return runs


def token_micro_batches(lengths: Tensor, rank: int, world: int, max_tokens: int) -> list[Tensor]:
    """This rank's rows (rank, rank + world, ... of the global batch, whose sequence lengths are
    `lengths`), as micro-batches of at most `max_tokens` tokens each; every rank gets as many
    (DDP and FSDP need equal backward counts: the shorter lists end in empty ones). The indices
    live on `lengths`' device."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    every = torch.arange(len(lengths), device=lengths.device)
    cuts = []
    for r in range(world):  # every rank's runs, so that all agree on their number
        mine = every[r::world]
        cuts.append([mine[run] for run in _runs(lengths[r::world].tolist(), max_tokens)])
    count = max(1, *(len(c) for c in cuts))
    empty = every[:0]
    return cuts[rank] + [empty] * (count - len(cuts[rank]))


@dataclass(frozen=True)
class Packed:
    """Rows laid end to end in one row: shapes (1, N), N = the sum of the rows' lengths."""

    input_ids: Tensor
    position_ids: Tensor
    """0, 1, ... from each row's first token."""


def pack(input_ids: Tensor, lengths: Tensor) -> Packed:
    """The first `lengths[i]` tokens of each right-padded row of `input_ids` (B, L), packed."""
    width = input_ids.shape[1]
    keep = torch.arange(width, device=input_ids.device)[None, :] < lengths[:, None]  # (B, L)
    positions = torch.arange(width, device=input_ids.device).expand_as(input_ids)
    return Packed(input_ids[keep][None, :], positions[keep][None, :])


def packed_positions(prompt_lens: Tensor, completion_lens: Tensor
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """For each completion token, row-major over the (B, T) completion grid: its row, its
    column, and the position in the packed row of the hidden state that predicts it (the
    token before it; its target sits at that position + 1)."""
    lengths = prompt_lens + completion_lens
    starts = torch.cumsum(lengths, 0) - lengths  # (B,) where each row begins
    width = int(completion_lens.max())
    cols = torch.arange(width, device=lengths.device)[None, :]  # (1, T)
    real = cols < completion_lens[:, None]  # (B, T)
    rows, cols = real.nonzero(as_tuple=True)
    return rows, cols, starts[rows] + prompt_lens[rows] - 1 + cols
