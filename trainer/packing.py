"""Micro-batches by tokens (`offpolicy.micro_batch_tokens`), packed without padding.

`token_micro_batches` gives each rank its micro-batches of the global batch as
trainer/balance.py plans them: first-fit-decreasing bins of at most `max_tokens` tokens
(prompt + completion; a longer row gets a bin of its own) over the whole batch, dealt to the
ranks in descending cost (tokens plus attention's quadratic term), so that micro-batch i costs
nearly the same on every rank and every rank gets as many (a rank short of bins gets empty ones
at the end: trainer/step.py trains a 2-token dummy of zero weight there). `pack` lays a
micro-batch's rows end to end in one row of `sum(lengths)` tokens with position ids restarting
at 0 for each, and the rows' boundaries computed once per micro-batch: `cu_seqlens` on the
rows' device and the same numbers on the host (`bounds`). `packed_forward` runs a decoder on
it with no attention mask of any kind: no (L, L) padding mask, no (N, N) block-diagonal one,
no padded token computed, on every transformers decoder
(Llama, Mistral, Qwen2, Qwen3: tests/trainer/test_packing_models.py).

Which attention runs where (`use_varlen_attention`, `packed_attention`):
- CUDA, flash-attn importable (`flash_attn_varlen_func` really imports): `flash_attention_2`,
  transformers' own varlen path with our `cu_seqlens` (fp32 activations cast to bf16 there).
- CUDA otherwise: `scalerl_varlen`, i.e. torch 2.13's `torch.nn.attention.varlen.varlen_attn`
  (aten's flash kernel: fp16/bf16, sm80+, head_dim <= 256 and a multiple of 8) on the whole
  packed row, one call per layer, no host sync; fp32 query, key and value under autocast are
  cast to its dtype first (as SDPA would be); fp32 without autocast, or an older GPU: SDPA row
  by row.
- CPU: `scalerl_varlen` runs SDPA's causal kernel on each row in turn (varlen_attn has no CPU
  kernel in torch 2.13), reading the host bounds: no sync, one call per row per layer.
A sliding window (Mistral, Qwen2's sliding layers) is applied within each row on every path.
Only the CPU paths are tested here; the CUDA ones are written against torch 2.13 and
transformers 5's sources (docs/gpu.md says what a GPU still has to prove).

The loss is unchanged: its aggregation weights are global (trainer/batch.py), so any split over
ranks and micro-batches sums to the same step. No model, no loss and no optimiser here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

import torch

from scalerl.trainer.balance import MicroBatchPlan, plan_micro_batches

Tensor = torch.Tensor


def token_micro_batches(lengths: Tensor, rank: int, world: int, max_tokens: int,
                        attention: float = 0.0) -> list[Tensor]:
    """This rank's micro-batches of the global batch (sequence lengths `lengths`) as
    `plan_micro_batches` deals them (`attention`: `attention_cost`, 0 counts tokens only); every
    rank gets as many (DDP and FSDP need equal backward counts: empty ones at the end where a
    rank ran out). The indices live on `lengths`' device."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1}")
    plan = plan_micro_batches(lengths.tolist(), world, max_tokens, attention)
    return rank_rows(plan, rank, lengths.device)


def rank_rows(plan: MicroBatchPlan, rank: int, device: torch.device) -> list[Tensor]:
    """Rank `rank`'s micro-batches of `plan` as index tensors on `device`."""
    return [torch.tensor(rows, dtype=torch.long, device=device) for rows in plan.rows[rank]]


@dataclass(frozen=True)
class Packed:
    """Rows laid end to end in one row: shapes (1, N), N = the sum of the rows' lengths."""

    input_ids: Tensor
    position_ids: Tensor
    """0, 1, ... from each row's first token."""
    cu_seqlens: Tensor
    """(B + 1,) int32 on the rows' device: where each row starts in the packed row, then N."""
    max_length: int
    """The longest row."""
    bounds: tuple[int, ...]
    """`cu_seqlens` on the host (the row-by-row attention reads it: no sync per layer)."""

    def attention_kwargs(self) -> dict:
        """The keyword arguments a transformers decoder passes down to its attention: the rows'
        boundaries (transformers' varlen names, which flash_attention_2 reads too), and no
        attention mask (`packed_forward` keeps transformers from building one)."""
        return {"position_ids": self.position_ids, "cu_seq_lens_q": self.cu_seqlens,
                "cu_seq_lens_k": self.cu_seqlens, "max_length_q": self.max_length,
                "max_length_k": self.max_length, ROW_BOUNDS: self.bounds,
                "attention_mask": None}


def pack(input_ids: Tensor, lengths: Tensor) -> Packed:
    """The first `lengths[i]` tokens of each right-padded row of `input_ids` (B, L), packed."""
    sizes = lengths.tolist()  # the micro-batch's one host sync
    width = input_ids.shape[1]
    keep = torch.arange(width, device=input_ids.device)[None, :] < lengths[:, None]  # (B, L)
    positions = torch.arange(width, device=input_ids.device).expand_as(input_ids)
    bounds = (0, *accumulate(sizes))
    cu = torch.tensor(bounds, dtype=torch.int32).to(input_ids.device)
    return Packed(input_ids[keep][None, :], positions[keep][None, :], cu, max(sizes), bounds)


VARLEN = "scalerl_varlen"
"""The attention implementation name `varlen_attention` is registered under in transformers."""
PACKED_ATTENTION = ("flash_attention_2", "flash_attention_3", VARLEN)
"""Attention implementations that attend within each packed row (they read `cu_seq_lens_q`)."""
ROW_BOUNDS = "scalerl_row_bounds"
"""The keyword argument carrying `Packed.bounds` down to the attention."""
_PACKED = ContextVar("scalerl_packed_forward", default=False)


@contextmanager
def packed_forward() -> Iterator[None]:
    """While a decoder runs on packed rows: `varlen_mask` builds no mask (it would be the (N, N)
    block-diagonal one); the attention reads the rows' boundaries instead."""
    token = _PACKED.set(True)
    try:
        yield
    finally:
        _PACKED.reset(token)


def varlen_mask(*args, **kwargs):
    """The mask of `scalerl_varlen`: none in a `packed_forward`, else SDPA's own mask."""
    from transformers.masking_utils import sdpa_mask

    return None if _PACKED.get() else sdpa_mask(*args, **kwargs)


@lru_cache(maxsize=16)
def _flash_capable(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device) >= (8, 0)


def _torch_varlen_fits(query: Tensor) -> bool:
    """Whether torch's varlen_attn (aten's flash kernel) takes this query (1, heads, N, dim)."""
    dim = query.shape[-1]
    return (query.is_cuda and query.dtype in (torch.float16, torch.bfloat16)
            and dim <= 256 and dim % 8 == 0 and _flash_capable(query.device))


def _torch_varlen(query: Tensor, key: Tensor, value: Tensor, cu: Tensor, longest: int,
                  scaling: float | None, window: int | None) -> Tensor:
    """torch 2.13's varlen_attn on the whole packed row, causal within each row (and within
    `window` tokens back, transformers' sliding window). Returns (1, N, heads, dim)."""
    from torch.nn.attention.varlen import varlen_attn

    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (N, heads, dim)
    window_size = (-1, 0) if window is None else (window - 1, 0)
    out = varlen_attn(q, k, v, cu, cu, longest, longest, scale=scaling,
                      window_size=window_size, enable_gqa=q.shape[1] != k.shape[1])
    return out[None]


def _row_sdpa(module, query: Tensor, key: Tensor, value: Tensor, bounds: tuple[int, ...],
              scaling: float | None, window: int | None, kwargs: dict) -> Tensor:
    """SDPA's causal kernel on each row in turn (a banded mask for a row longer than `window`).
    Returns (1, N, heads, dim)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        mask = None
        if window is not None and b - a > window:
            i = torch.arange(b - a, device=query.device)
            mask = ((i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window))[None, None]
        rows.append(sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b],
                                           value[:, :, a:b], mask, scaling=scaling,
                                           **kwargs)[0])
    return torch.cat(rows, dim=1)


def varlen_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask,
                     dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' SDPA attention, within each packed row when the call carries the rows'
    boundaries (`cu_seq_lens_q`), else exactly SDPA's. `query` (1, heads, N, head_dim); returns
    (1, N, heads, head_dim) as SDPA's does."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.pop("cu_seq_lens_q", None)
    bounds = kwargs.pop(ROW_BOUNDS, None)
    if cu is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    if dropout:
        raise ValueError(f"packed rows attend without dropout, not {dropout} "
                         "(set the model's attention_dropout to 0)")
    window = kwargs.pop("sliding_window", None)
    longest = kwargs.pop("max_length_q")
    for name in ("cu_seq_lens_k", "max_length_k", "position_ids"):
        kwargs.pop(name, None)
    device = query.device.type
    if query.dtype == torch.float32 and torch.is_autocast_enabled(device):
        # fp32 master weights under autocast: RoPE's fp32 cos/sin promote q and k to fp32;
        # SDPA would compute in the autocast dtype, and so does this
        low = torch.get_autocast_dtype(device)
        query, key, value = (t.to(low) for t in (query, key, value))
    if _torch_varlen_fits(query):
        return _torch_varlen(query, key, value, cu, longest, scaling, window), None
    bounds = tuple(cu.tolist()) if bounds is None else bounds
    return _row_sdpa(module, query, key, value, bounds, scaling, window, kwargs), None


def use_varlen_attention(model) -> None:
    """Let a transformers model attend within packed rows: kept when it runs flash attention
    (varlen already), else switched to `varlen_attention` (SDPA's numbers on padded rows, whose
    mask it keeps)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if model.config._attn_implementation in PACKED_ATTENTION:
        return
    AttentionInterface.register(VARLEN, varlen_attention)
    AttentionMaskInterface.register(VARLEN, varlen_mask)
    model.set_attn_implementation(VARLEN)


def flash_attention_unusable() -> str | None:
    """None when flash-attn's varlen kernel really imports (and transformers agrees), else why
    not, in one line (a missing package, or a wheel built for another torch or CUDA)."""
    try:
        from flash_attn import flash_attn_varlen_func  # noqa: F401
    except Exception as error:  # ImportError, OSError (undefined symbol), RuntimeError
        return f"{type(error).__name__}: {error}".splitlines()[0]
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():
        return "transformers' is_flash_attn_2_available() says no"
    return None


def packed_attention(device: torch.device) -> str | None:
    """The attn_implementation to load the policy with for packed rows on `device`:
    `flash_attention_2` on CUDA when flash-attn imports, else None (SDPA, which
    `use_varlen_attention` switches to `scalerl_varlen`), with a warning on CUDA saying why."""
    if device.type != "cuda":
        return None
    reason = flash_attention_unusable()
    if reason is None:
        return "flash_attention_2"
    print(f"warning: flash-attn is not usable ({reason}); packed rows use torch's varlen_attn "
          "(trainer/packing.py)", file=sys.stderr, flush=True)
    return None


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
