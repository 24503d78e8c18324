"""One optimizer step on a global `TrainBatch`: shard over ranks, micro-batch, backward, clip, step.

The aggregation weights were computed over the global batch, so the step sums weighted micro-batch
losses (no averaging over micro-batches) and scales by the world size to undo DDP's gradient mean:
any (ranks x micro-batches) split gives the gradient of the one big batch, micro-batches of
`micro_batch_size` padded rows or of at most `micro_batch_tokens` tokens packed without padding
(trainer/balance.py: bins of the whole batch dealt to the ranks so that micro-batch i costs
about the same on each). A rank short of micro-batches trains a 2-token dummy of zero weight in
their place. Returns the step's statistics reduced over ranks, with the micro-batches per rank
and their imbalance across ranks (`step_imbalance`: the step's cost over the ideal). No data
loading, no generation, no logging here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from scalerl.trainer.balance import padded_costs, plan_micro_batches, step_imbalance
from scalerl.trainer.batch import TrainBatch
from scalerl.trainer.losses import aggregate, get_loss
from scalerl.trainer.packing import pack, rank_rows
from scalerl.trainer.stopping import StepAbandoned
from scalerl.trainer.waiting import any_rank

Tensor = torch.Tensor
SUM_KEYS = ("loss", "tokens", "entropy", "mismatch_kl", "clip_frac", "cispo_trunc_frac",
            "is_ratio")


@dataclass(frozen=True)
class StepSettings:
    """Plain values one step needs (from the trainer config)."""

    loss: str
    loss_kwargs: dict
    micro_batch_size: int
    temperature: float
    fp32_head: bool
    max_grad_norm: float | None
    micro_batch_tokens: int | None = None
    """When set, micro-batches are runs of rows of at most this many tokens, packed without
    padding (trainer/packing.py); else `micro_batch_size` padded rows."""
    attention_cost: float = 0.0
    """A row's attention cost per token² relative to its linear cost per token
    (trainer/balance.py `attention_cost`; 0: tokens only): weighs rows when micro-batches are
    dealt to ranks and when their imbalance is reported; the step's result does not depend on
    it."""


def shard_rows(n_rows: int, rank: int, world: int, micro_batch_size: int,
               device: torch.device | str = "cpu") -> list[Tensor]:
    """This rank's rows of the global batch, cut into the same number of micro-batches on every
    rank (DDP and FSDP need equal backward counts); an empty chunk is returned as an empty index.
    The indices live on `device`, the batch's."""
    mine = torch.arange(rank, n_rows, world, device=device)
    per_rank = math.ceil(n_rows / world)
    n_micro = max(1, math.ceil(per_rank / micro_batch_size))
    return [mine[i * micro_batch_size:(i + 1) * micro_batch_size] for i in range(n_micro)]


def _forward(model, mb: TrainBatch, s: StepSettings) -> tuple[Tensor, Tensor]:
    """(B, T) logprobs and entropies of one micro-batch: its padded rows, or packed ones."""
    if s.micro_batch_tokens is None:
        return model(mb.input_ids, mb.attention_mask, mb.prompt_lens, mb.completion_lens,
                     s.temperature, s.fp32_head)
    packed = pack(mb.input_ids, mb.prompt_lens + mb.completion_lens)
    return model(None, None, mb.prompt_lens, mb.completion_lens, s.temperature, s.fp32_head,
                 packed)


def _micro_loss(model, mb: TrainBatch, s: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """Weighted loss of one micro-batch and its per-token statistic sums."""
    logprobs, entropy = _forward(model, mb, s)
    spec = get_loss(s.loss)
    per_token, loss_stats = spec.fn(logprobs, mb.old_logprobs, mb.advantages, mb.mask,
                                    **s.loss_kwargs)
    loss = aggregate(per_token, mb.weights)
    m = mb.mask
    log_ratio = (logprobs.detach() - mb.old_logprobs) * m
    ratio = torch.exp(log_ratio)
    sums = {
        "loss": loss.detach(),
        "tokens": m.sum(),
        "entropy": (entropy * m).sum(),
        "mismatch_kl": ((ratio - 1 - log_ratio) * m).sum(),  # k3 estimator of KL(gen || train)
        "clip_frac": (loss_stats.get("clip_frac", torch.zeros_like(m)) * m).sum(),
        "cispo_trunc_frac": (loss_stats.get("cispo_trunc_frac", torch.zeros_like(m)) * m).sum(),
        "is_ratio": (ratio * m).sum(),
        "is_ratio_min": torch.where(m > 0, ratio, torch.inf).min(),
        "is_ratio_max": torch.where(m > 0, ratio, -torch.inf).max(),
    }
    return loss, sums


def _dummy(batch: TrainBatch) -> TrainBatch:
    """A micro-batch for a rank with no rows left (DDP and FSDP need every rank's backward): one
    prompt token and one completion token, zero weight and zero mask, so it adds nothing to the
    loss or the gradients. Two tokens, the least a completion token's prediction needs."""
    ids = batch.input_ids[:1, :1].repeat(1, 2)
    one = torch.ones(1, dtype=batch.prompt_lens.dtype, device=ids.device)
    zero = torch.zeros(1, 1, dtype=batch.mask.dtype, device=ids.device)
    return TrainBatch(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_lens=one,
                      completion_lens=one, old_logprobs=zero, mask=zero,
                      advantages=torch.zeros_like(batch.advantages[:1]), weights=zero)


def train_step(accelerator, model, optimizer, scheduler, batch: TrainBatch,
               s: StepSettings, stop: Callable[[], bool] | None = None) -> dict[str, float]:
    """Backward over this rank's micro-batches, clip, optimizer and scheduler step.

    `stop` (a stop was asked on this rank) is read before every micro-batch and agreed over the
    ranks: when any rank asks, every rank raises StepAbandoned there, before the optimizer step.

    `model` is a `PolicyModule`, wrapped by Accelerate for DDP or sharded by FSDP2
    (trainer/sharding.py): an FSDP2 module has no `no_sync`, so its gradients are reduce-scattered
    after every micro-batch into the sharded gradients (summed: the same step).
    """
    rank, world = accelerator.process_index, accelerator.num_processes
    chunks, imbalance = micro_batches(batch, rank, world, s)
    totals: dict[str, Tensor] = {}
    model.train()
    for i, rows in enumerate(chunks):
        if stop is not None and any_rank(stop()):  # every rank at the same micro-batch
            optimizer.zero_grad(set_to_none=True)  # nothing updated: the weights, the optimizer
            raise StepAbandoned(f"micro-batch {i + 1} of {len(chunks)}")  # and schedule stand
        mb = batch.select(rows) if len(rows) else _dummy(batch)
        mb = TrainBatch(**{k: v.to(accelerator.device) for k, v in mb.__dict__.items()})
        last = i == len(chunks) - 1
        ctx = accelerator.no_sync(model) if not last else nullcontext()
        with ctx:
            loss, sums = _micro_loss(model, mb, s)
            accelerator.backward(loss * accelerator.num_processes)
        for k, v in sums.items():
            totals[k] = _combine(k, totals.get(k), v.detach().float())
    grad_norm = _clip(accelerator, model, s.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return _reduce(accelerator, totals) | {"grad_norm": grad_norm, "imbalance": imbalance,
                                           "micro_batches": float(len(chunks))}


def micro_batches(batch: TrainBatch, rank: int, world: int,
                  s: StepSettings) -> tuple[list[Tensor], float]:
    """This rank's micro-batches (row indices on the batch's device, as many on every rank)
    and the step's imbalance across ranks (`step_imbalance`, the same on every rank)."""
    lengths = (batch.prompt_lens + batch.completion_lens).tolist()
    device = batch.input_ids.device
    if s.micro_batch_tokens is not None:
        plan = plan_micro_batches(lengths, world, s.micro_batch_tokens, s.attention_cost)
        return rank_rows(plan, rank, device), plan.imbalance
    every = [shard_rows(len(batch), r, world, s.micro_batch_size) for r in range(world)]
    costs = padded_costs(lengths, [[c.tolist() for c in rank_chunks] for rank_chunks in every],
                         s.attention_cost)
    return [c.to(device) for c in every[rank]], step_imbalance(costs)


def _combine(key: str, old: Tensor | None, new: Tensor) -> Tensor:
    if old is None:
        return new
    if key == "is_ratio_min":
        return torch.minimum(old, new)
    if key == "is_ratio_max":
        return torch.maximum(old, new)
    return old + new


def _clip(accelerator, model, max_norm: float | None) -> float:
    if max_norm is None:
        max_norm = float("inf")
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
    return float(norm)


def _reduce(accelerator, totals: dict[str, Tensor]) -> dict[str, float]:
    """Sums over ranks; means per trained token; min/max of the ratio."""
    out: dict[str, float] = {}
    if accelerator.num_processes > 1:
        extremes = {"is_ratio_min": _gather(accelerator, totals["is_ratio_min"]).min(),
                    "is_ratio_max": _gather(accelerator, totals["is_ratio_max"]).max()}
        totals = {k: accelerator.reduce(v, reduction="sum") for k, v in totals.items()
                  if k not in extremes} | extremes
    tokens = max(float(totals["tokens"]), 1.0)
    out["loss"] = float(totals["loss"])
    out["train_tokens"] = float(totals["tokens"])
    for key in SUM_KEYS[2:]:
        out[key] = float(totals[key]) / tokens
    out["is_ratio_min"] = float(totals["is_ratio_min"])
    out["is_ratio_max"] = float(totals["is_ratio_max"])
    return out


def _gather(accelerator, value: Tensor) -> Tensor:
    return accelerator.gather(value.reshape(1))
