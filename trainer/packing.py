"""Micro-batches by tokens (`offpolicy.micro_batch_tokens`), packed without padding.

`token_micro_batches` cuts each rank's rows of the global batch into runs of consecutive rows
whose sequences (prompt + completion) add up to at most `max_tokens` (a longer row gets a run of
its own), the same number of runs on every rank. `pack` lays a run's rows end to end in one row
of `sum(lengths)` tokens with position ids restarting at 0 for each and the rows' boundaries
(`cu_seqlens`), which transformers hands to the attention: varlen flash attention
(`flash_attention_2`, on GPU when flash-attn is installed) or `varlen_sdpa` (registered as
`scalerl_varlen`: SDPA's causal kernel on each row in turn, anywhere), so no (L, L) mask of any
kind is built and no padded token is computed. `packed_positions` says where each completion
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
    cu_seqlens: Tensor
    """(B + 1,) int32: where each row starts in the packed row, then N."""
    max_length: int
    """The longest row."""

    def attention_kwargs(self) -> dict:
        """The keyword arguments a transformers decoder passes to a varlen attention: the rows'
        boundaries, and an attention mask that tells it to build none (an (N, N) one would be
        the block-diagonal mask the packing avoids)."""
        return {"position_ids": self.position_ids, "cu_seq_lens_q": self.cu_seqlens,
                "cu_seq_lens_k": self.cu_seqlens, "max_length_q": self.max_length,
                "max_length_k": self.max_length,
                "attention_mask": {"full_attention": None, "sliding_attention": None}}


def pack(input_ids: Tensor, lengths: Tensor) -> Packed:
    """The first `lengths[i]` tokens of each right-padded row of `input_ids` (B, L), packed."""
    width = input_ids.shape[1]
    keep = torch.arange(width, device=input_ids.device)[None, :] < lengths[:, None]  # (B, L)
    positions = torch.arange(width, device=input_ids.device).expand_as(input_ids)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = torch.cumsum(lengths, 0)
    return Packed(input_ids[keep][None, :], positions[keep][None, :], cu, int(lengths.max()))


def boundaries(position_ids: Tensor) -> tuple[Tensor, int]:
    """`cu_seqlens` and the longest row of a packed row from its position ids (1, N): each row
    starts where a position is 0."""
    flat = position_ids.reshape(-1)
    starts = (flat == 0).nonzero().reshape(-1).to(torch.int32)
    end = torch.tensor([flat.numel()], dtype=torch.int32, device=flat.device)
    cu = torch.cat([starts, end])
    return cu, int(cu.diff().max())


VARLEN = "scalerl_varlen"
"""The attention implementation name `varlen_sdpa` is registered under in transformers."""
PACKED_ATTENTION = ("flash_attention_2", "flash_attention_3", VARLEN)
"""Attention implementations that attend within each packed row (they read `cu_seq_lens_q`)."""


def varlen_sdpa(module, query: Tensor, key: Tensor, value: Tensor, attention_mask,
                dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' SDPA attention, on each packed row in turn when the call carries the rows'
    boundaries (`cu_seq_lens_q`: causal within each, no mask), else exactly SDPA's.
    `query` (1, heads, N, head_dim); returns (1, N, heads, head_dim) as SDPA's does."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.pop("cu_seq_lens_q", None)
    if cu is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    bounds = cu.tolist()
    rows = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b],
                                   None, dropout=dropout, scaling=scaling, **kwargs)[0]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return torch.cat(rows, dim=1), None


def use_varlen_attention(model) -> None:
    """Let a transformers model attend within packed rows: kept when it runs flash attention
    (varlen already), else switched to `varlen_sdpa` (the same numbers as SDPA on padded rows,
    whose mask it keeps)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if model.config._attn_implementation in PACKED_ATTENTION:
        return
    AttentionInterface.register(VARLEN, varlen_sdpa)
    AttentionMaskInterface.register(VARLEN, sdpa_mask)
    model.set_attn_implementation(VARLEN)


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
