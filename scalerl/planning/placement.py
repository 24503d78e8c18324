"""Which GPUs of a node train and which generate, for a run whose vLLM engines it starts itself
(an engine in rank 0's process, or several local servers), and how many GPUs there are.

`plan_placement` is the rule (a pure function): the trainer's ranks on a node take one GPU each,
in order; the engines take `engine.devices` (indices among the GPUs the run sees,
`data_parallel_size` x `tensor_parallel_size` of them) or, by default, the GPUs right after the
trainer's: as many engines of `tensor_parallel_size` GPUs as fit in what the ranks leave
(`engine.data_parallel_size` null), else the number asked for; with none to spare (one GPU) one
engine shares the first GPUs with trainer ranks, and the plan says so. `splits` lists a node's
splits between trainer ranks and engines and `choose_layout` picks the fastest of those that fit
(the dry run's models judge them: scalerl/planning/layouts.py). `gpu_count` counts the node's
GPUs without starting CUDA; `apply_to_trainer` then makes each trainer process see the trainer's
GPUs (rank r trains on the r-th) before CUDA starts, and `check_cuda_view` checks, once it has,
that CUDA sees what was counted; `engine_env` is the engines' view, set while they start.
`trainer_allocator` gives trainer processes expandable_segments (not the engines) unless the
user chose an allocator setting. No engine and no training here.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scalerl.coerce import ConfigError


class PlacementError(ConfigError):
    """The node's GPUs cannot hold the requested layout (one line naming what is missing)."""


@dataclass(frozen=True)
class Placement:
    train: tuple[str, ...]
    """CUDA device ids (as the launcher's CUDA_VISIBLE_DEVICES names them) of the trainer ranks
    on this node, local rank r on train[r]."""
    generate: tuple[str, ...]
    """CUDA device ids vLLM generates on (rank 0's node), engine i on the i-th slice of
    `len(generate) // engines` of them."""
    engines: int = 1
    """vLLM engines on those GPUs (several: local servers the run starts)."""

    def __post_init__(self) -> None:
        if self.engines < 1 or len(self.generate) % self.engines:
            raise ValueError(f"Placement: {len(self.generate)} engine GPUs do not split into "
                             f"{self.engines} engines")

    @property
    def shared(self) -> tuple[str, ...]:
        return tuple(d for d in self.generate if d in self.train)

    def engine_gpus(self) -> list[tuple[str, ...]]:
        """Each engine's GPUs."""
        tp = len(self.generate) // self.engines
        return [self.generate[i * tp:(i + 1) * tp] for i in range(self.engines)]

    def held(self, world: int) -> int:
        """GPUs the run holds: one per trainer rank (all nodes) plus the engines' own."""
        return world + len(self.generate) - len(self.shared)

    def describe(self) -> str:
        where = "; ".join(",".join(g) for g in self.engine_gpus())
        what = (f"vLLM on GPU {where}" if self.engines == 1 else
                f"{self.engines} vLLM engines (local servers) on GPU {where}")
        text = f"placement: trainer ranks on GPU {','.join(self.train)}; {what}"
        if self.shared:
            text += (" (shared with trainer ranks: engine.memory_fraction must leave them room; "
                     "set engine.devices or launch fewer ranks per node to separate them)")
        return text


@dataclass(frozen=True)
class Layout:
    """A split of one node: trainer ranks, and engines of `tp` GPUs each."""

    ranks: int
    """Trainer processes (FSDP2 ranks) on the node, one GPU each."""
    engines: int
    """vLLM engines."""
    tp: int
    """GPUs per engine (tensor parallelism)."""

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.engines < 1 or self.tp < 1:
            raise ValueError(f"Layout needs ranks, engines and tp >= 1, got {self.ranks}, "
                             f"{self.engines}, {self.tp}")

    @property
    def gpus(self) -> int:
        return self.ranks + self.engines * self.tp


def visible_gpus(count: int, env: str | None) -> list[str]:
    """The GPU ids the run sees: the launcher's CUDA_VISIBLE_DEVICES, else 0..count-1."""
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(count)]


def plan_placement(visible: Sequence[str], ranks: int, tp: int,
                   devices: Sequence[int] | None = None, *, exclusive: bool = False,
                   engines: int | None = None) -> Placement:
    """Trainer and engine GPUs for `ranks` trainer processes on a node and engines spanning
    `tp` GPUs each; `devices`: the engines' GPUs as indices into `visible` (None: the default
    rule); `engines`: how many (None: as many as the spare GPUs hold, at least one).
    `exclusive`: no engine may share a GPU with a trainer rank (NCCL weight transfer)."""
    placement = _plan(visible, ranks, tp, devices, engines)
    if exclusive and placement.shared:
        raise PlacementError(
            f"engine.weight_transfer = nccl needs the engine on GPUs of its own, but GPU "
            f"{','.join(placement.shared)} would be shared with trainer ranks ({len(visible)} "
            f"visible, {ranks} trainer ranks, tensor_parallel_size {tp}): launch fewer ranks "
            "per node or use engine.weight_transfer = files")
    return placement


def _plan(visible: Sequence[str], ranks: int, tp: int, devices: Sequence[int] | None,
          engines: int | None) -> Placement:
    n = len(visible)
    if ranks > n:
        raise PlacementError(f"{ranks} trainer processes on this node but {n} GPUs visible: "
                             "launch at most one rank per GPU")
    if tp > n:
        raise PlacementError(f"engine.tensor_parallel_size = {tp} but {n} GPUs visible")
    if devices is not None:
        count = engines or max(1, len(devices) // tp)
        bad = [d for d in devices if not 0 <= d < n]
        if bad or len(set(devices)) != len(devices) or len(devices) != tp * count:
            raise PlacementError(
                f"engine.devices = {list(devices)}: need {tp * count} distinct GPU indices in "
                f"0..{n - 1} (engine.tensor_parallel_size = {tp} x {count} engines; {n} GPUs "
                "visible)")
        generate = [visible[d] for d in devices]
        rest = [v for v in visible if v not in generate]
        train = rest[:ranks] if len(rest) >= ranks else list(visible[:ranks])
        return Placement(tuple(train), tuple(generate), count)
    spare = n - ranks
    if engines is None:
        engines = max(1, spare // tp)
    if engines > 1 and engines * tp > spare:
        raise PlacementError(
            f"engine.data_parallel_size = {engines} engines of {tp} GPUs need {engines * tp} "
            f"GPUs, but {ranks} trainer ranks leave {spare} of the {n} visible")
    generate = visible[ranks:ranks + engines * tp] if spare >= engines * tp else visible[:tp]
    return Placement(tuple(visible[:ranks]), tuple(generate), engines)


def splits(gpus: int, tp: int, engines: int | None = None) -> list[Layout]:
    """Every split of a node of `gpus` GPUs: 1 .. gpus - tp trainer ranks, the rest engines of
    `tp` GPUs (`engines` of them when given, else as many as fit)."""
    out = []
    for ranks in range(1, gpus - tp + 1):
        count = engines or (gpus - ranks) // tp
        if count >= 1 and ranks + count * tp <= gpus:
            out.append(Layout(ranks=ranks, engines=count, tp=tp))
    return out


def choose_layout(layouts: Iterable[Layout], *, fits: Callable[[Layout], bool],
                  step_s: Callable[[Layout], float]) -> Layout | None:
    """Of `layouts`, the one with the shortest predicted step among those that `fits` (ties:
    more trainer ranks); None when none fits."""
    ok = [layout for layout in layouts if fits(layout)]
    return min(ok, key=lambda lay: (step_s(lay), -lay.ranks)) if ok else None


def gpu_count(env: dict[str, str] | None = None, dev: Path = Path("/dev")) -> int:
    """The node's GPUs, without starting CUDA (once CUDA has counted the devices, a later
    CUDA_VISIBLE_DEVICES is ignored in this process): the launcher's CUDA_VISIBLE_DEVICES when
    set, else NVML's count (the driver's library, loaded directly), else the /dev/nvidiaN device
    nodes; 0 without any. torch's own `device_count` asks CUDA itself when NVML is missing."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    count = _nvml_count()
    if count >= 0:
        return count
    return len([p for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)])


def _nvml_count() -> int:
    """NVML's device count, or -1 when NVML cannot be loaded or initialised."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return -1
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0:
        return -1
    try:
        return int(count.value) if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else -1
    finally:
        nvml.nvmlShutdown()


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
TRAINER_ALLOC_CONF = "expandable_segments:True"
"""The trainer's CUDA allocator setting unless the user set one: segments that grow in place
fragment less than fixed blocks (torch 2.13 docs, "CUDA memory management", optimizing memory
usage with PYTORCH_CUDA_ALLOC_CONF; sizing.py's FRAGMENTATION assumes it). Only read when CUDA
starts, so set before."""


_set_here = False
"""`trainer_allocator` set PYTORCH_CUDA_ALLOC_CONF in this process (the user did not)."""


def trainer_allocator(env: dict[str, str] | None = None) -> bool:
    """Set PYTORCH_CUDA_ALLOC_CONF to `TRAINER_ALLOC_CONF` in this (trainer) process unless the
    user set it; True when it was set here (`engine_env` then keeps it from the engines)."""
    global _set_here
    env = os.environ if env is None else env
    if ALLOC_CONF in env:
        return False
    env[ALLOC_CONF] = TRAINER_ALLOC_CONF
    _set_here = True
    return True



def apply_to_trainer(placement: Placement) -> None:
    """This trainer process sees the trainer's GPUs only (local rank r -> cuda:r = train[r]).
    Must run before CUDA starts in the process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(placement.train)


def check_cuda_view(placement: Placement, seen: int) -> None:
    """Once CUDA has started (`seen`: its device count): PlacementError (one line) unless it
    sees exactly the trainer's GPUs, as counted before it started."""
    if seen != len(placement.train):
        raise PlacementError(
            f"placement counted the trainer's GPUs as {','.join(placement.train)} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}) but CUDA sees "
            f"{seen} device(s): CUDA started before the view was narrowed, or the launcher's "
            "CUDA_VISIBLE_DEVICES names GPUs this node does not have")


@contextmanager
def engine_env(placement: Placement | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES = the engines' GPUs while they start (their processes inherit it;
    several local servers split it in order); the trainer process's own CUDA view is fixed
    already and the variable is restored."""
    if placement is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(placement.generate)
    ours = _set_here and os.environ.get(ALLOC_CONF) == TRAINER_ALLOC_CONF  # not the engines'
    if ours:
        del os.environ[ALLOC_CONF]
    try:
        yield
    finally:
        if ours:
            os.environ[ALLOC_CONF] = TRAINER_ALLOC_CONF
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
