"""Which rows each rank trains in which micro-batch, so that the ranks wait on each other least.

FSDP2 all-gathers every layer of every micro-batch on every rank together (and DDP all-reduces
the gradients after each rank's last one), so a step costs about the sum over micro-batch
indices of the slowest rank's micro-batch. `plan_micro_batches` packs the whole global batch
into bins of at most `max_tokens` tokens, first fit, longest row first (a longer row gets a bin
of its own), gives every rank the same number of micro-batches, and deals the bins out in
descending cost, `world` at a time, so that micro-batch i costs nearly the same on every rank
(the deal snakes, ranks 0..w-1 then w-1..0, so that each rank's total stays level too, DDP's
cost). A row's cost is its tokens plus causal attention's quadratic term (`row_cost`,
`attention_cost`). `step_imbalance` is the step's cost over the ideal (the total cost shared
evenly): 1.0 is perfect, it is what `trainer/imbalance` reports.

Every row lands in exactly one micro-batch; which one changes no loss (trainer/batch.py's weights
are global). Plain Python over lists of lengths: no torch, no model, no loss here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def attention_cost(layers: int, attention_width: int, compute_params: int) -> float:
    """Cost per token² of a row's causal attention, relative to 1 per token for its linear
    layers: a row of L tokens costs L + a·L², a = layers x attention width / compute params.

    From PaLM's FLOP count (Chowdhery et al. 2022, appendix B): training a token costs 6N for
    the N parameters it multiplies through, plus 12·layers·heads·head_dim·T for attention over
    T positions; causal attention computes half of the T x T scores (flash attention skips the
    masked blocks), so a row of L tokens costs 6N·L + 6·layers·width·L². Divided by 6N: the
    above. Qwen3-8B (36 layers, 32 x 128, 7.57B compute params): a = 1.95e-5, a 16k-token row
    costs 1.32x its tokens. FLOPs only: attention's kernels may run at another efficiency than
    the linear layers' GEMMs (a GPU run's step times would calibrate it)."""
    if layers < 1 or attention_width < 1 or compute_params < 1:
        raise ValueError(f"attention_cost needs layers, attention width and compute params "
                         f">= 1, got {layers}, {attention_width}, {compute_params}")
    return layers * attention_width / compute_params


def row_cost(length: int, attention: float) -> float:
    """A row's cost in token units: its tokens plus the attention term (`attention_cost`)."""
    return length + attention * length * length


@dataclass(frozen=True)
class MicroBatchPlan:
    """The rows of each rank's micro-batches, and what each costs."""

    rows: tuple[tuple[tuple[int, ...], ...], ...]
    """[rank][micro-batch]: indices into the global batch (in batch order); () is a rank with
    no rows left at that index (trainer/step.py trains a zero-weight dummy there)."""
    costs: tuple[tuple[float, ...], ...]
    """[rank][micro-batch]: `row_cost` summed over its rows (0 for an empty one)."""

    @property
    def count(self) -> int:
        """Micro-batches per rank (the same on every rank)."""
        return len(self.rows[0])

    @property
    def imbalance(self) -> float:
        return step_imbalance(self.costs)


def step_imbalance(costs: tuple[tuple[float, ...], ...] | list[list[float]]) -> float:
    """The step's cost over the ideal: the sum over micro-batch indices of the costliest rank's
    micro-batch, divided by the total cost over the ranks (`costs[rank][i]`, as many on every
    rank). 1.0: every rank equally busy at every index; 1.0 for a batch of no cost."""
    world = len(costs)
    counts = {len(c) for c in costs}
    if world < 1 or len(counts) != 1:
        raise ValueError(f"step_imbalance needs >= 1 rank with as many micro-batches on each, "
                         f"got {sorted(counts)} micro-batches over {world} ranks")
    total = sum(sum(c) for c in costs)
    if total <= 0:
        return 1.0
    step = sum(max(c[i] for c in costs) for i in range(len(costs[0])))
    return step * world / total


def first_fit_decreasing(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Bins of row indices: rows longest first (the lower index on a tie), each into the first
    bin it fits in (at most `max_tokens` tokens), else a new bin (a row longer than
    `max_tokens` alone)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        j = next((j for j, free in enumerate(room) if free >= n), None)
        if j is None:
            bins.append([i])
            room.append(max_tokens - n)
        else:
            bins[j].append(i)
            room[j] -= n
    return bins


def plan_micro_batches(lengths: list[int], world: int, max_tokens: int,
                       attention: float = 0.0) -> MicroBatchPlan:
    """Every rank's micro-batches of the global batch whose rows have `lengths` tokens:
    `first_fit_decreasing` bins, dealt out `world` at a time in descending cost (ties: the bin
    of the earliest row first), snaking over the ranks; ceil(bins / world) micro-batches on
    every rank (at least 1), the last ones empty on the ranks the bins ran out for."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    if attention < 0:
        raise ValueError(f"attention must be >= 0, got {attention}")
    bins = [sorted(b) for b in first_fit_decreasing(lengths, max_tokens)]
    cost = [sum(row_cost(lengths[i], attention) for i in b) for b in bins]
    order = sorted(range(len(bins)), key=lambda b: (-cost[b], bins[b][0]))
    count = max(1, math.ceil(len(bins) / world))
    rows: list[list[tuple[int, ...]]] = [[()] * count for _ in range(world)]
    costs: list[list[float]] = [[0.0] * count for _ in range(world)]
    for k, b in enumerate(order):
        index, place = divmod(k, world)
        rank = place if index % 2 == 0 else world - 1 - place
        rows[rank][index], costs[rank][index] = tuple(bins[b]), cost[b]
    return MicroBatchPlan(tuple(map(tuple, rows)), tuple(map(tuple, costs)))


def padded_costs(lengths: list[int], micro_batches: list[list[list[int]]],
                 attention: float) -> list[list[float]]:
    """[rank][i] cost of right-padded micro-batches (`micro_batch_size` rows): each row computed
    at the micro-batch's longest length (trainer/batch.py trims to it), padding included."""
    return [[len(mb) * row_cost(max((lengths[i] for i in mb), default=0), attention)
             for mb in rank] for rank in micro_batches]


def model_attention_cost(model) -> float:
    """`attention_cost` of a transformers decoder, from its config (layers, heads x head_dim)
    and its parameters (all but an untied input embedding: a lookup; a DTensor counts whole)."""
    c = model.config
    width = c.num_attention_heads * (getattr(c, "head_dim", None)
                                     or c.hidden_size // c.num_attention_heads)
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head is None or head.weight is not embedding:
        params -= embedding.numel()
    return attention_cost(c.num_hidden_layers, width, params)
