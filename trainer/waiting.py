"""Ranks that wait while rank 0 works alone: the generator, held-out validation, checkpoint files
and weight publishing all run on rank 0, for hours at real budgets, while the other ranks have
nothing to do but wait for the next batch.

Waiting inside the trainer's own collectives would hit their timeout (`policy.collective_timeout_s`;
NCCL's watchdog then kills the job), so every wait for rank 0 happens on a separate gloo group
with a timeout of `WAIT` instead: `wait_for_rank0` (a barrier), `broadcast_from_rank0` (the
step's groups, pickled) and `broadcast_tensor_from_rank0` (the step's collated batch). A
rank that dies still ends the job: torchrun stops every rank when one exits.
`init_waiting` creates the group; every rank calls it once, right after the process group
exists and before rank 0 starts working alone. No training here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

WAIT = timedelta(days=30)
"""Longest a rank waits for rank 0 (a run's generation or validation never takes this long)."""

_group: list[Any] = []


def init_waiting() -> None:
    """Create the waiting group (a collective over every rank; a no-op in one process)."""
    if dist.is_initialized() and dist.get_world_size() > 1 and not _group:
        _group.append(dist.new_group(backend="gloo", timeout=WAIT))


def _waiting_group():
    if not _group:
        raise RuntimeError("trainer.waiting.init_waiting() was not called on every rank first")
    return _group[0]


def distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def wait_for_rank0() -> None:
    """Block until every rank, rank 0 included, reaches this call (no collective timeout)."""
    if distributed():
        dist.barrier(group=_waiting_group())


def broadcast_from_rank0(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (pickled; the others pass anything)."""
    if not distributed():
        return obj
    payload = [obj]
    dist.broadcast_object_list(payload, src=0, group=_waiting_group())
    return payload[0]


def broadcast_tensor_from_rank0(tensor: Any) -> None:
    """Rank 0's `tensor` into every rank's `tensor` (same shape and dtype), in place."""
    if distributed():
        dist.broadcast(tensor, src=0, group=_waiting_group())


def any_rank(flag: bool) -> bool:
    """Whether `flag` is true on any rank (every rank calls it at the same point; a CPU
    all-reduce on the waiting group, so it neither syncs the GPU nor meets a collective
    timeout)."""
    if not distributed():
        return flag
    import torch

    value = torch.tensor([int(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_waiting_group())
    return bool(value.item())
