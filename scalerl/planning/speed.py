"""The dry run's throughput plan (`scalerl train --dry-run`): the split of the node it chooses,
the engines' settings, and the chosen layout's predicted speed beside every split's.

`choose_ranks` searches the splits of a node (scalerl/planning/layouts.py) when the launcher or
the user did not fix the ranks; `sized_engine` gives the engine config as the run will start it;
`plan_speed` times the placed layout (scalerl/planning/throughput.py) and `speed_lines` prints
it. A model, not a measurement (docs/gpu.md); nothing is started.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalerl.config import RunConfig
from scalerl.planning.layouts import Candidate, candidates, engine_settings, fastest
from scalerl.planning.placement import Layout, Placement
from scalerl.planning.sizing import GIB, ModelShape, gib
from scalerl.planning.throughput import (
    GPUS,
    Gpu,
    Throughput,
    Workload,
    gpu_for,
    gpu_named,
    throughput,
    warnings,
)
from scalerl.rollout.engine_config import EngineConfig


@dataclass(frozen=True)
class Speed:
    """The throughput model's plan (scalerl/planning/throughput.py) for a dry run's layout."""

    gpu: str
    """The GPU model the figures are for (registry name)."""
    engine: EngineSizing
    """How each engine is started: its GPUs, KV cache and max_num_seqs."""
    workload: Workload
    """What one step asks for (mean prompt and completion: stated assumptions unless given)."""
    plan: Throughput | None
    """The chosen layout's predicted speed (None: its engines hold no sequence)."""
    layouts: tuple[Candidate, ...]
    """Every split of the node, sized and timed (empty when the ranks were given)."""
    warnings: tuple[str, ...]
    """What the plan would waste, one line each."""
    launch: str
    """The command that launches this layout."""
    best: Candidate | None = None
    """The fastest split that fits (None: none searched, or none fits)."""
    refusal: str = ""
    """Why this launch is refused ("" when it is not): its step over `plan.max_slowdown` times
    the best split's, that split's launch line, and how to override."""


@dataclass(frozen=True)
class EngineSizing:
    """An engine's settings as the run will start it."""

    engines: int
    """vLLM engines (more than one: local servers the run starts)."""
    tensor_parallel_size: int
    """GPUs per engine."""
    kv_cache_gib: float
    """KV cache per engine GPU."""
    max_num_seqs: int
    """Most sequences each engine schedules at once."""


def gpu_model(name: str | None, gpu_bytes: int) -> Gpu:
    """The GPU model: a registered name, else by a device's name or the memory."""
    if name is not None and name in GPUS:
        return gpu_named(name)
    return gpu_for(gpu_bytes / GIB, name)


def choose_ranks(cfg: RunConfig, shape: ModelShape, *, gpus: int, gpu_bytes: int,
                 gpu: Gpu | None, work: Workload, given: tuple[int, int] | None,
                 default: tuple[int, int]) -> tuple[int, int, list[Candidate]]:
    """(trainer ranks per node, in all, the splits of the node searched): on a node whose GPUs
    are known and host the engines, every split is searched; `given` (the launcher's or the
    user's) when set, else the split the throughput model predicts fastest among those that
    fit; else (or when none fits: its refusal names the fix) `default`."""
    if gpu is None or cfg.engine.servers:
        return (*(given or default), [])
    found = candidates(cfg, shape, gpus=gpus, gpu=gpu, gpu_bytes=gpu_bytes, work=work)
    if given is not None:
        return (*given, found)
    best = fastest(found)
    if best is None:
        return (*default, found)
    return best.layout.ranks, best.layout.ranks, found


def searched_tp(cfg: RunConfig, found: list[Candidate]) -> RunConfig:
    """`cfg` with the searched splits' tensor parallelism (the smallest that holds the
    model), when a split was searched."""
    if not found:
        return cfg
    tp = found[0].layout.tp
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine,
                                                               tensor_parallel_size=tp))


def sized_engine(shape: ModelShape, e: EngineConfig, placement: Placement | None, *,
                 gpu_bytes: int, context: int, trainer: dict[str, int]) -> EngineConfig:
    """The engine config as the run will start it (KV from the GPU, max_num_seqs from the KV;
    layouts.py), the engines placed; unchanged KV when no GPU is known."""
    if placement is not None:
        e = dataclasses.replace(e, data_parallel_size=placement.engines)
    shared = placement is not None and bool(placement.shared)
    if not gpu_bytes and e.kv_cache_gib is None:
        return e
    return engine_settings(shape, e, gpu_bytes=gpu_bytes, context=context,
                           trainer_bytes=sum(trainer.values()) if shared else 0)


def launch_line(local: int, recipe: str | None, sets: dict[str, object]) -> str:
    """The torchrun command of `local` trainer ranks per node with `--set`s."""
    extra = "".join(f" --set {key}={value}" for key, value in sets.items())
    return (f"torchrun --nproc_per_node {local} -m scalerl train --config "
            f"{recipe or 'CONFIG'}{extra}")


def slow_refusal(plan: Throughput | None, best: Candidate | None, *, max_slowdown: float | None,
                 recipe: str | None, sets: dict[str, object]) -> str:
    """The one line refusing a layout whose step is over `max_slowdown` x the best split's
    ("" when it is not, or no split was searched)."""
    if plan is None or best is None or max_slowdown is None:
        return ""
    ratio = plan.step_s / best.speed.step_s
    if ratio <= max_slowdown:
        return ""
    lay, b = plan.layout, best.layout
    return (f"refused: {lay.ranks} trainer ranks : {lay.engines} engine(s) is predicted "
            f"{ratio:.1f}x slower per step than {b.ranks}:{b.engines} ({plan.step_s:,.0f} s "
            f"against {best.speed.step_s:,.0f} s, over plan.max_slowdown {max_slowdown:g}); "
            f"launch `{launch_line(b.ranks, recipe, sets)}`, or add --set "
            "plan.max_slowdown=null to run this split anyway")


def plan_speed(shape: ModelShape, e: EngineConfig, gpu: Gpu | None, *, world: int, local: int,
               placement: Placement | None, work: Workload, found: list[Candidate],
               in_flight: int, recipe: str | None, max_slowdown: float | None = None,
               micro_tokens: int | None = None) -> Speed | None:
    """The throughput plan of the placed layout (None without a GPU model or a KV size), its
    launch line (with `micro_tokens` as offpolicy.micro_batch_tokens when given), and its
    refusal when it is over `max_slowdown` x the fastest split's step (one node only)."""
    if gpu is None or e.kv_cache_gib is None:
        return None
    engines = placement.engines if placement is not None else len(e.servers) or 1
    lay = Layout(ranks=world, engines=engines, tp=e.tensor_parallel_size)
    try:
        plan = throughput(shape, gpu, lay, work, dtype=e.dtype,
                          kv_bytes=int(e.kv_cache_gib * GIB), max_num_seqs=e.max_num_seqs,
                          transfer=e.weight_transfer)
    except ValueError:  # the KV cache holds no sequence at the mean context
        plan = None
    sets: dict[str, object] = ({} if not found or e.tensor_parallel_size == 1 else
                               {"engine.tensor_parallel_size": e.tensor_parallel_size})
    launch = launch_line(local, recipe, sets | ({"offpolicy.micro_batch_tokens": micro_tokens}
                                                if micro_tokens else {}))
    sizing = EngineSizing(engines=engines, tensor_parallel_size=e.tensor_parallel_size,
                          kv_cache_gib=e.kv_cache_gib, max_num_seqs=e.max_num_seqs)
    said = warnings(plan, in_flight, overlap=work.overlap) if plan else []
    best = fastest(found) if found else None
    refusal = "" if world != local else slow_refusal(plan, best, max_slowdown=max_slowdown,
                                                     recipe=recipe, sets=sets)
    return Speed(gpu=gpu.name, engine=sizing, workload=work, plan=plan, layouts=tuple(found),
                 warnings=tuple(said), launch=launch, best=best, refusal=refusal)


def speed_lines(speed: Speed | None) -> list[str]:
    """The throughput plan as printed lines: the engines' settings, every split searched, the
    chosen one's decode and trainer tokens/s, step, rollouts per hour and wall time."""
    if speed is None:
        return []
    w, en, p = speed.workload, speed.engine, speed.plan
    lines = [f"throughput on {speed.gpu} (a model, not a measurement: docs/gpu.md): "
             f"{w.rollouts_per_step} rollouts per step, mean prompt {w.prompt_tokens} + "
             f"completion {w.completion_tokens} tokens",
             f"engines: {en.engines} x TP {en.tensor_parallel_size}, KV cache "
             f"{en.kv_cache_gib:.1f} GiB per GPU, max_num_seqs {en.max_num_seqs}"]
    if speed.layouts:
        lines.append("splits of the node (trainer ranks : engines):")
        for c in speed.layouts:
            chosen = p is not None and c.fits and c.layout.ranks == p.layout.ranks
            head = (f"  {'*' if chosen else ' '} "
                    f"{c.layout.ranks}:{c.layout.engines}  trainer rank "
                    f"{gib(c.trainer_bytes):5.1f} GiB  ")
            lines.append(head + ("does not fit" if not c.fits or c.speed is None else
                                 f"step {c.speed.step_s:6.0f} s, trainer idle "
                                 f"{c.speed.trainer_idle:4.0%}, "
                                 f"{c.speed.rollouts_per_hour:7,.0f} rollouts/h"))
    if p is not None:
        d = p.decode
        lines += [f"decode: {d.tokens_per_s:,.0f} tokens/s per engine ({d.sequences} sequences, "
                  f"{d.step_s * 1e3:.1f} ms steps, {d.bound}-bound), "
                  f"{p.decode_tokens_per_s:,.0f} in all",
                  f"trainer: {p.trainer_tokens_per_s:,.0f} tokens/s over {p.layout.ranks} ranks",
                  f"step: generate {p.generate_s:.0f} s, train {p.train_s:.0f} s "
                  f"({'overlapped, PipelineRL' if w.overlap else 'in turn, PPO-offpolicy'}), "
                  f"publish {p.publish_s:.1f} s, validation {p.validation_s:.1f} s, checkpoint "
                  f"{p.checkpoint_s:.1f} s -> {p.step_s:.0f} s "
                  f"({p.step_range[0]:.0f}-{p.step_range[1]:.0f} s: every uncertain constant "
                  "at its optimistic and at its pessimistic end, scalerl/planning/"
                  "calibration.py)",
                  f"decode context {w.context} tokens (p + E[L^2]/2E[L], length-biased); "
                  f"trainer idle {p.trainer_idle:.0%}, engines idle {p.generator_idle:.0%}",
                  f"{p.rollouts_per_hour:,.0f} rollouts per hour; {w.steps} steps in "
                  f"{p.wall_s / 86400:.1f} days ({p.step_range[0] * w.steps / 86400:.1f}-"
                  f"{p.step_range[1] * w.steps / 86400:.1f})"]
    return lines + list(speed.warnings) + [f"launch: {speed.launch}"]
