"""What rank 0 sends the other ranks each step: the groups without their tokens, then the batch.

Rank 0 alone generates, scores and filters; the other ranks used to receive every rollout
pickled (~16M Python ints and floats at the recipe's 768 rollouts of up to 16k tokens: 100 MB,
~0.5 s to pickle and ~1 s to unpickle) and each collate the padded batch from them again (~5 s
apiece). Now `light_groups` leaves the per-token fields (prompt and completion ids, logprobs,
versions) and the completion text out of what is pickled, so the other ranks get the verdicts,
finish reasons, lengths and ids their filters, reward bookkeeping and error watch read, and
`share_batch` broadcasts the tensors of the batch rank 0 collated (`collate`) into every rank,
on the waiting group (trainer/waiting.py: no collective timeout while rank 0 collates). Every
rank then trains on the very tensors rank 0 built: the same per-rank batches as when each rank
collated them itself (tests/trainer/test_wire.py, under a 2-rank torchrun). `scalerl bench
control` times both paths. Nothing here trains or filters.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch

from scalerl.trainer.batch import TrainBatch
from scalerl.trainer.filters import Group
from scalerl.trainer.waiting import broadcast_from_rank0, broadcast_tensor_from_rank0, distributed


def light_groups(groups: list[Group]) -> list[Group]:
    """`groups` without the rollouts' per-token fields and completion text (what the ranks
    other than 0 never read: they train on rank 0's batch)."""
    return [[replace(r, prompt_token_ids=(), token_ids=(), logprobs=(), versions=(),
                     completion="") for r in group] for group in groups]


def share_batch(batch: TrainBatch | None, rows: int) -> TrainBatch:
    """Rank 0's collated `batch` (None on the other ranks) on every rank. `rows`: the rollouts
    this rank kept; a rank that kept another number than rank 0 collated is an error (its
    filters disagreed with rank 0's)."""
    if not distributed():
        return batch
    header = None if batch is None else [
        (f.name, tuple(getattr(batch, f.name).shape), getattr(batch, f.name).dtype)
        for f in fields(TrainBatch)]
    header = broadcast_from_rank0(header)
    tensors = {}
    for name, shape, dtype in header:
        tensor = (getattr(batch, name).contiguous() if batch is not None
                  else torch.empty(shape, dtype=dtype))
        broadcast_tensor_from_rank0(tensor)
        tensors[name] = tensor
    shared = TrainBatch(**tensors)
    if len(shared) != rows:
        raise RuntimeError(f"rank 0 collated {len(shared)} rows but this rank's filters kept "
                           f"{rows}: a filter or truncation policy that reads the per-token "
                           "fields disagrees across ranks (trainer/wire.py sends them only to "
                           "rank 0's batch)")
    return shared
