"""A run config in the throughput model's terms, and the layout a node should take.

`workload(cfg)` is what one step asks for (rollouts, their mean prompt and completion, the
steps, PipelineRL's overlap); `engine_settings` sizes an engine from its GPU: the KV cache fills
what `engine.memory_fraction` of the GPU leaves after the weights and the engine's runtime (as
vLLM 0.32's own `determine_available_memory` does: requested memory less weights, activations,
non-torch memory and CUDA graphs), and `max_num_seqs` is what that KV holds at the expected
context; `candidates` sizes and times every split of a node between trainer ranks and engines
(memory: sizing.py, speed: throughput.py) and `fastest` picks one (placement.py's rule).
Reads config values only: no GPU is touched and nothing starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalerl.config import RunConfig
from scalerl.planning.lora_sizing import engine_lora_memory
from scalerl.planning.placement import (
    Layout,
    Placement,
    PlacementError,
    choose_layout,
    splits,
)
from scalerl.planning.sizing import (
    BYTES,
    ENGINE_RESERVE,
    GIB,
    ModelShape,
    kv_bytes_per_token,
    model_shape,
    trainer_layout,
    trainer_memory,
    usable,
)
from scalerl.planning.throughput import Gpu, Throughput, Workload, max_num_seqs_for, throughput
from scalerl.rollout.engine_config import EngineConfig

PROMPT_TOKENS = 512
"""Mean prompt length assumed (chat template included): Polaris' problems are a few hundred
tokens, DeepCoder's up to ~1,500. An assumption; `--prompt-tokens` replaces it."""
COMPLETION_SHARE = 0.5
"""Mean completion assumed as this share of the longest the tasks' budgets allow (the scalerl
recipe: 0.5 x (12,288 + 2,048) = 7,168). An assumption until a run's `rollout/length_mean`
replaces it (`--completion-tokens`)."""
MAX_TP = 8
"""Largest tensor parallelism tried for an engine whose weights do not fit one GPU."""


def workload(cfg: RunConfig, *, completion_tokens: int | None = None,
             prompt_tokens: int | None = None, completion_rms: float | None = None
             ) -> Workload:
    """One step of `cfg`: its rollouts, their mean lengths (the assumptions above unless
    given; `completion_rms`: sqrt(E[L^2]), else throughput.py's LENGTH_CV2), its steps;
    PipelineRL overlaps generation and training, PPO-offpolicy-k publishes once per k steps;
    validation on the training engines (val.limit x val.n per task; none with val.servers, or
    with val.limit null: its size is the test splits', unknown here) and checkpoints at their
    cadence."""
    o = cfg.offpolicy
    prompt = PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
    if completion_tokens is None:
        weights = sum(t.weight for t in cfg.tasks) or 1.0
        longest = sum(t.weight * t.budget.hard_cap(0) for t in cfg.tasks) / weights
        longest = min(longest, cfg.engine.max_model_len - prompt)
        completion_tokens = max(1, int(COMPLETION_SHARE * longest))
    v, c = cfg.val, cfg.checkpoint
    return Workload(rollouts_per_step=o.prompts_per_step * o.rollouts_per_prompt,
                    prompt_tokens=prompt, completion_tokens=completion_tokens, steps=cfg.steps,
                    overlap=o.mode == "pipelinerl",
                    steps_per_publish=1 if o.mode == "pipelinerl" else o.k,
                    completion_sq_mean=None if completion_rms is None else completion_rms ** 2,
                    val_rollouts=(0 if v.servers or v.limit is None
                                  else v.limit * v.n * len(cfg.tasks)),
                    val_every=max(0, v.every), checkpoint_every=max(0, c.every),
                    checkpoint_every_s=max(0.0, c.every_s),
                    sharded=cfg.policy.sharding == "fsdp2")


def kv_bytes_from_gpu(shape: ModelShape, e: EngineConfig, gpu_bytes: int,
                      trainer_bytes: int = 0) -> int:
    """KV bytes one engine GPU holds: memory_fraction x the GPU, less a sharing trainer rank's
    peak, the weights' share, the engine's runtime (sizing.ENGINE_RESERVE) and a LoRA run's
    slots; 0 when nothing is left."""
    tp = e.tensor_parallel_size
    room = (e.memory_fraction * gpu_bytes - trainer_bytes - shape.params * BYTES[e.dtype] / tp
            - ENGINE_RESERVE)
    if e.lora is not None:  # a LoRA run's slots and buffers (lora_sizing.py)
        room -= sum(engine_lora_memory(shape, e.lora, dtype=e.dtype, tp=tp,
                                       max_tokens=e.max_model_len).values())
    return max(0, int(room))


def engine_settings(shape: ModelShape, e: EngineConfig, *, gpu_bytes: int, context: int,
                    trainer_bytes: int = 0) -> EngineConfig:
    """`e` with an explicit KV size (`kv_cache_gib` null: from the GPU, `kv_bytes_from_gpu`)
    and `max_num_seqs` (null: what the KV holds at `context` tokens per sequence). PlacementError
    (one line) when the GPU leaves no KV cache, or null KV without a GPU."""
    kv_gib = e.kv_cache_gib
    if kv_gib is None:
        if not gpu_bytes:
            raise PlacementError("engine.kv_cache_gib = null sizes the KV cache from the engine "
                                 "GPU's memory, but there is no GPU: set engine.kv_cache_gib "
                                 "(GiB)")
        kv = kv_bytes_from_gpu(shape, e, gpu_bytes, trainer_bytes)
        if kv < kv_bytes_per_token(shape, e.dtype, e.tensor_parallel_size) * e.max_model_len:
            raise PlacementError(
                f"the engine's GPU ({gpu_bytes / GIB:.1f} GiB, memory_fraction "
                f"{e.memory_fraction}) leaves {kv / GIB:.1f} GiB of KV cache after the weights "
                f"and its runtime: not one {e.max_model_len}-token sequence; raise "
                "engine.tensor_parallel_size or engine.memory_fraction")
        kv_gib = kv / GIB
    seqs = e.max_num_seqs
    if seqs is None:
        per_token = kv_bytes_per_token(shape, e.dtype, e.tensor_parallel_size)
        seqs = max_num_seqs_for(int(kv_gib * GIB) // per_token, context)
    return dataclasses.replace(e, kv_cache_gib=kv_gib, max_num_seqs=seqs)


def engine_tp(shape: ModelShape, e: EngineConfig, gpu_bytes: int) -> int:
    """The smallest tensor parallelism (at least engine.tensor_parallel_size, doubling up to
    MAX_TP) whose GPUs hold the weights, the runtime and one full-length sequence's KV. More
    would model faster (fewer weight bytes per GPU) but the model does not count TP's
    all-reduces, so it is not offered."""
    tp = e.tensor_parallel_size
    while tp < MAX_TP and kv_bytes_from_gpu(shape, dataclasses.replace(
            e, tensor_parallel_size=tp), gpu_bytes) < (
            kv_bytes_per_token(shape, e.dtype, tp) * e.max_model_len):
        tp *= 2
    return tp


@dataclass(frozen=True)
class Candidate:
    """One split of a node, sized and timed."""

    layout: Layout
    """Trainer ranks, engines, their tensor parallelism."""
    trainer_bytes: int
    """Peak bytes on one trainer GPU."""
    fits: bool
    """A trainer rank fits (1 - plan.memory_margin) of its GPU (the engines' KV is sized to
    theirs)."""
    speed: Throughput | None
    """Its predicted speed (None when the engines' GPU holds no sequence)."""


def candidate(cfg: RunConfig, shape: ModelShape, layout: Layout, *, world: int, gpu: Gpu,
              gpu_bytes: int, work: Workload) -> Candidate:
    """`layout` sized (sizing.py, over `world` trainer ranks in all) and timed."""
    trainer = sum(trainer_memory(shape, trainer_layout(cfg, world)).values())
    e = dataclasses.replace(cfg.engine, tensor_parallel_size=layout.tp)
    try:
        e = engine_settings(shape, e, gpu_bytes=gpu_bytes, context=work.context)
    except PlacementError:
        return Candidate(layout, trainer, False, None)
    speed = throughput(shape, gpu, dataclasses.replace(layout, ranks=world), work,
                       dtype=e.dtype, kv_bytes=int(e.kv_cache_gib * GIB),
                       max_num_seqs=e.max_num_seqs, transfer=e.weight_transfer)
    return Candidate(layout, trainer, trainer <= usable(gpu_bytes, cfg.plan.memory_margin),
                     speed)


def candidates(cfg: RunConfig, shape: ModelShape, *, gpus: int, gpu: Gpu, gpu_bytes: int,
               work: Workload) -> list[Candidate]:
    """Every split of one node of `gpus` GPUs (placement.py's `splits`; engines of the
    smallest tensor parallelism that holds the model, `engine.data_parallel_size` of them when
    set), sized and timed."""
    tp = engine_tp(shape, cfg.engine, gpu_bytes)
    return [candidate(cfg, shape, layout, world=layout.ranks, gpu=gpu, gpu_bytes=gpu_bytes,
                      work=work)
            for layout in splits(gpus, tp, cfg.engine.data_parallel_size)]


def fastest(found: list[Candidate]) -> Candidate | None:
    """The candidate with the shortest predicted step among those that fit (placement.py's
    `choose_layout`); None when none fits."""
    by_layout = {c.layout: c for c in found}
    best = choose_layout(by_layout, fits=lambda lay: by_layout[lay].fits,
                         step_s=lambda lay: by_layout[lay].speed.step_s)
    return None if best is None else by_layout[best]


def size_engines(cfg: RunConfig, placement: Placement | None, model_path: str, ranks: int, *,
                 gpu_bytes: int) -> tuple[RunConfig, str]:
    """`cfg` with the engines as placed (`engine.data_parallel_size`; one without a placement)
    and, where null, the KV cache and `max_num_seqs` from an engine GPU of `gpu_bytes`
    (`engine_settings`; a trainer rank's peak taken off a shared GPU), and the line saying so
    ("" when nothing was sized)."""
    e = cfg.engine
    e = dataclasses.replace(e, data_parallel_size=(placement.engines if placement is not None
                                                   else e.data_parallel_size or 1))
    if e.kv_cache_gib is not None and e.max_num_seqs is not None:
        return dataclasses.replace(cfg, engine=e), ""
    shape = model_shape(model_path)
    trainer = (sum(trainer_memory(shape, trainer_layout(cfg, ranks)).values())
               if placement is not None and placement.shared else 0)
    e = engine_settings(shape, e, gpu_bytes=gpu_bytes, context=workload(cfg).context,
                        trainer_bytes=trainer)
    line = (f"engines: {e.data_parallel_size} x tensor_parallel_size {e.tensor_parallel_size}, "
            f"KV cache {e.kv_cache_gib:.1f} GiB per GPU (of {gpu_bytes / GIB:.1f}), "
            f"max_num_seqs {e.max_num_seqs}")
    return dataclasses.replace(cfg, engine=e), line
