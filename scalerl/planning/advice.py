"""What the dry run advises beside its verdict (scalerl/planning/dry_run.py): the largest
micro-batch the room the memory margin leaves holds (sizing.py `largest_micro_tokens`), and the
fastest split to launch instead of one that cannot start.
Pure functions over the dry run's values; nothing is started.
"""

from __future__ import annotations

from scalerl.planning.sizing import ModelShape, TrainerLayout, largest_micro_tokens
from scalerl.planning.throughput import Workload


def micro_fit(shape: ModelShape, layout: TrainerLayout, work: Workload, room: int) -> int:
    """The most tokens a packed micro-batch of `layout` may hold in `room` bytes (sizing.py
    `largest_micro_tokens`), up to the tokens a rank trains on in one step: fewer, larger
    micro-batches (fewer FSDP2 all-gathers per step)."""
    per_rank = work.rollouts_per_step * work.sequence // layout.ranks // 1024 * 1024
    return min(largest_micro_tokens(shape, layout, room), max(1024, per_rank))


def bigger_micro(fit: int, configured: int | None, max_model_len: int) -> int | None:
    """`fit` when the run packs its rows (`configured`: offpolicy.micro_batch_tokens, None
    when rows are padded) and it is larger than the configured micro-batch and holds a
    full-length row; else None (nothing to advise)."""
    if configured is None or fit <= configured or fit < max_model_len:
        return None
    return fit


def best_split(found: list, recipe: str | None) -> str:
    """"; the fastest split that fits: launch `...`" ("" when none was searched or fits)."""
    from scalerl.planning.layouts import fastest
    from scalerl.planning.speed import launch_line

    best = fastest(found) if found else None
    if best is None:
        return ""
    return (f"; the fastest split that fits is {best.layout.ranks}:{best.layout.engines}: "
            f"launch `{launch_line(best.layout.ranks, recipe, {})}`")
