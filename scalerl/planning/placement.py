"""Which GPUs of a node train and which generate, for a run whose vLLM engine lives in rank 0.

`plan_placement` is the rule (a pure function): the trainer's ranks on a node take one GPU each,
in order; the engine takes `engine.devices` (indices among the GPUs the run sees) or, by default,
the `tensor_parallel_size` GPUs right after the trainer's when the node has that many to spare;
otherwise it shares the first GPUs with trainer ranks, and the plan says so. `apply_to_trainer`
makes each trainer process see the trainer's GPUs (so rank r trains on the r-th), before CUDA
starts; `engine_env` is the engine's view, set while it starts. No engine and no training here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from scalerl.coerce import ConfigError


class PlacementError(ConfigError):
    """The node's GPUs cannot hold the requested layout (one line naming what is missing)."""


@dataclass(frozen=True)
class Placement:
    train: tuple[str, ...]
    """CUDA device ids (as the launcher's CUDA_VISIBLE_DEVICES names them) of the trainer ranks
    on this node, local rank r on train[r]."""
    generate: tuple[str, ...]
    """CUDA device ids vLLM generates on (rank 0's node)."""

    @property
    def shared(self) -> tuple[str, ...]:
        return tuple(d for d in self.generate if d in self.train)

    def held(self, world: int) -> int:
        """GPUs the run holds: one per trainer rank (all nodes) plus the engine's own."""
        return world + len(self.generate) - len(self.shared)

    def describe(self) -> str:
        text = (f"placement: trainer ranks on GPU {','.join(self.train)}; vLLM on GPU "
                f"{','.join(self.generate)}")
        if self.shared:
            text += (" (shared with trainer ranks: engine.memory_fraction must leave them room; "
                     "set engine.devices or launch fewer ranks per node to separate them)")
        return text


def visible_gpus(count: int, env: str | None) -> list[str]:
    """The GPU ids the run sees: the launcher's CUDA_VISIBLE_DEVICES, else 0..count-1."""
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(count)]


def plan_placement(visible: Sequence[str], ranks: int, tp: int,
                   devices: Sequence[int] | None = None, *, exclusive: bool = False) -> Placement:
    """Trainer and engine GPUs for `ranks` trainer processes on a node and an engine spanning
    `tp` GPUs; `devices`: the engine's GPUs as indices into `visible` (None: the default rule).
    `exclusive`: the engine may share no GPU with a trainer rank (NCCL weight transfer)."""
    placement = _plan(visible, ranks, tp, devices)
    if exclusive and placement.shared:
        raise PlacementError(
            f"engine.weight_transfer = nccl needs the engine on GPUs of its own, but GPU "
            f"{','.join(placement.shared)} would be shared with trainer ranks ({len(visible)} "
            f"visible, {ranks} trainer ranks, tensor_parallel_size {tp}): launch fewer ranks "
            "per node or use engine.weight_transfer = files")
    return placement


def _plan(visible: Sequence[str], ranks: int, tp: int,
          devices: Sequence[int] | None) -> Placement:
    n = len(visible)
    if ranks > n:
        raise PlacementError(f"{ranks} trainer processes on this node but {n} GPUs visible: "
                             "launch at most one rank per GPU")
    if devices is not None:
        bad = [d for d in devices if not 0 <= d < n]
        if bad or len(set(devices)) != len(devices) or len(devices) != tp:
            raise PlacementError(
                f"engine.devices = {list(devices)}: need {tp} distinct GPU indices in 0..{n - 1} "
                f"(engine.tensor_parallel_size = {tp}; {n} GPUs visible)")
        generate = [visible[d] for d in devices]
        rest = [v for v in visible if v not in generate]
        train = rest[:ranks] if len(rest) >= ranks else list(visible[:ranks])
        return Placement(tuple(train), tuple(generate))
    if tp > n:
        raise PlacementError(f"engine.tensor_parallel_size = {tp} but {n} GPUs visible")
    spare = n - ranks
    generate = visible[ranks:ranks + tp] if spare >= tp else visible[:tp]
    return Placement(tuple(visible[:ranks]), tuple(generate))


def apply_to_trainer(placement: Placement) -> None:
    """This trainer process sees the trainer's GPUs only (local rank r -> cuda:r = train[r]).
    Must run before CUDA starts in the process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(placement.train)


@contextmanager
def engine_env(placement: Placement | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES = the engine's GPUs while the engine starts (its processes inherit
    it); the trainer process's own CUDA view is fixed already and the variable is restored."""
    if placement is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(placement.generate)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
