"""`scalerl train --dry-run`: whether a run fits its GPUs, before the first GPU hour.

`plan_run(cfg, ...)` builds the model on `meta` from its config.json alone (no weights; a hub id
fetches that one file), places the trainer ranks and the engine as the run would
(scalerl/planning/placement.py) on the GPUs seen or told of, and sizes each trainer rank and the
engine with scalerl/planning/sizing.py's memory model: weights, gradients, optimizer, all-gathered
layers, activations at the micro-batch's tokens, logits chunks, the norms' fp32 copies, the FP32
head's operand copy and its fallback temporary, FSDP2's fp32 reduce-scatter buffers, rank 0's
publish staging and the allocator's fragmentation; the memory margin (`plan.memory_margin`) and
the micro-batch the room it leaves holds (scalerl/planning/advice.py); the engine's KV capacity
in full-length sequences, the rollouts in flight and the bytes of each publish. `DryRun.refusal`
is the one line a layout gets that cannot fit within the margin, or whose step is over
`plan.max_slowdown` x the fastest split's. No GPU memory is allocated and nothing starts.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass

from scalerl.config import RunConfig
from scalerl.planning.advice import best_split, bigger_micro, micro_fit
from scalerl.planning.balance import balance_lines
from scalerl.planning.grading_load import NODE_CORES, GradingLoad, grading_line, plan_grading
from scalerl.planning.layouts import workload
from scalerl.planning.lora_sizing import lora_plan, publish_bytes, publish_line
from scalerl.planning.placement import Placement, PlacementError, gpu_count, plan_placement
from scalerl.planning.sizing import (
    GIB,
    ModelShape,
    TrainerLayout,
    engine_memory,
    gib,
    kv_bytes_per_token,
    largest_micro_tokens,
    model_shape,
    trainer_layout,
    trainer_memory,
    usable,
)
from scalerl.planning.speed import (
    Speed,
    choose_ranks,
    gpu_model,
    plan_speed,
    searched_tp,
    sized_engine,
    speed_lines,
)
from scalerl.planning.throughput import GPUS, Workload

MAX_RANKS = 1024
"""Most FSDP2 ranks `DryRun.scale_out` searches."""


@dataclass(frozen=True)
class DryRun:
    """What a run would hold where (bytes by part), and whether it fits."""

    model: str
    """policy.model."""
    shape: ModelShape
    """The model's sizes (parameters counted on `meta`)."""
    gpus: int
    """GPUs per node, seen or told of (0: none, the fit is not checked)."""
    gpu_bytes: int
    """Memory of each GPU (0: unknown)."""
    ranks: int
    """Trainer processes in all (sharded over, or replicated on)."""
    placement: Placement | None
    """Which GPUs of a node train and which generate (None: no GPUs, or engine.servers)."""
    layout: TrainerLayout
    """How one trainer rank holds and computes the model (its micro-batch's tokens)."""
    trainer: dict[str, int]
    """Peak bytes on one trainer GPU, by part."""
    engine: dict[str, int]
    """Bytes on one engine GPU, by part (empty with engine.servers: sized on the servers)."""
    engine_budget: int
    """What vLLM may use on its GPU: engine.memory_fraction x the GPU (0: unknown)."""
    kv_sequences: float
    """Full-length (engine.max_model_len) sequences the KV cache holds."""
    rollouts_per_step: int
    """prompts_per_step x rollouts_per_prompt."""
    in_flight: int
    """Rollouts submitted to the engine at once (PipelineRL: its lag window; PPO: a round)."""
    publish_bytes: int
    """Bytes of the weights sent to the engine at each publish (in the engine's dtype)."""
    speed: Speed | None = None
    """The throughput plan of this layout, and of every split of the node (None: no GPU)."""
    engine_tp: int = 1
    """GPUs of one engine (engine.tensor_parallel_size as sized)."""
    margin: float = 0.0
    """plan.memory_margin: the share of each GPU the plan leaves free."""
    micro_fit: int = 0
    """The most tokens a packed micro-batch may hold in what the margin leaves (`room`), up
    to a rank's tokens per step (0: unknown, no GPU)."""
    grading: GradingLoad | None = None
    """Whether the node's spare cores grade a step while it generates (None: no plan)."""

    @property
    def usable(self) -> int:
        """The bytes of a GPU the plan may use: (1 - margin) x the GPU."""
        return usable(self.gpu_bytes, self.margin)

    @property
    def room(self) -> int:
        """What a trainer rank may use: `usable`, less the engine on a shared GPU."""
        shared = self.placement is not None and self.placement.shared
        return self.usable - (sum(self.engine.values()) if shared else 0)

    @property
    def refusal(self) -> str:
        """The one line saying why the layout cannot fit, or is refused as far slower than the
        best split ("" when it fits or is unchecked)."""
        if not self.gpu_bytes:
            return ""
        shared = self.placement is not None and self.placement.shared
        trainer = sum(self.trainer.values()) + (sum(self.engine.values()) if shared else 0)
        limit = (f"{gib(self.usable):.1f} GiB of the GPUs' {gib(self.gpu_bytes):.1f} "
                 f"(plan.memory_margin {self.margin:g})")
        if trainer > self.usable:
            what = "a trainer rank and the engine need" if shared else "a trainer rank needs"
            return f"does not fit: {what} {gib(trainer):.1f} GiB per GPU, over {limit}; " + \
                self.advice()
        if self.engine and not shared and sum(self.engine.values()) > min(self.engine_budget,
                                                                          self.usable):
            return (f"does not fit: the engine needs {gib(self.engine):.1f} GiB, "
                    f"engine.memory_fraction allows {gib(self.engine_budget):.1f} GiB of its "
                    f"GPU and the margin {limit}: lower engine.kv_cache_gib, or "
                    "engine.memory_fraction to at most 1 - plan.memory_margin")
        return self.speed.refusal if self.speed is not None else ""

    def advice(self) -> str:
        """The largest micro-batch (in tokens) that would fit, as a setting."""
        tokens = largest_micro_tokens(self.shape, self.layout, self.room)
        if tokens < 1024:
            return self.scale_out()
        return (f"set offpolicy.micro_batch_tokens to {tokens} or less (now "
                f"{self.layout.micro_tokens} tokens per micro-batch)")

    def scale_out(self) -> str:
        """What a model whose state does not fit these GPUs needs: the fewest FSDP2 ranks whose
        GPUs hold a rank's share at this micro-batch, the engines' tensor parallelism, and the
        nodes for both (CPU offload of the state is not implemented)."""
        sharded = dataclasses.replace(self.layout, sharded=True, padded_rows=0)
        for ranks in range(1, MAX_RANKS + 1):
            per_rank = sum(trainer_memory(self.shape, dataclasses.replace(sharded, ranks=ranks))
                           .values())
            if per_rank <= self.usable:
                break
        else:
            return (f"no number of FSDP2 ranks up to {MAX_RANKS} fits a rank in "
                    f"{gib(self.usable):.1f} GiB: lower offpolicy.micro_batch_tokens")
        gpus = max(self.gpus, 1)
        nodes = -(-(ranks + self.engine_tp) // gpus)
        return (f"the state alone does not fit: it needs {ranks} FSDP2 trainer ranks "
                f"({gib(per_rank):.1f} GiB each) and engines of TP {self.engine_tp} (bf16 "
                f"weights {gib(2 * self.shape.params):.1f} GiB), at least {nodes} nodes of {gpus} "
                "GPUs (docs/scale-out.md); CPU offload of the optimizer state is not "
                "supported")

    def to_json(self) -> dict:
        out = asdict(self)
        out["placement"] = None if self.placement is None else {
            "train": list(self.placement.train), "generate": list(self.placement.generate),
            "engines": [list(g) for g in self.placement.engine_gpus()]}
        out["fits"] = not self.refusal
        out["refusal"] = self.refusal
        out["trainer_gib"] = gib(self.trainer)
        out["engine_gib"] = gib(self.engine) if self.engine else 0.0
        return out


def launched() -> bool:
    """Under torchrun/accelerate (RANK and LOCAL_WORLD_SIZE set; LOCAL_WORLD_SIZE alone is no
    launcher: vLLM's CPU platform sets it in any process that started an engine)."""
    return "LOCAL_WORLD_SIZE" in os.environ and "RANK" in os.environ


def launch_ranks(gpus: int, cfg: RunConfig, ranks: int | None) -> tuple[int, int]:
    """(trainer ranks per node, in all): the launcher's (torchrun/accelerate set RANK,
    LOCAL_WORLD_SIZE, WORLD_SIZE), else `ranks`, else one per GPU the engine leaves free (every
    GPU with engine.servers), one on a CPU."""
    if launched():
        local = int(os.environ["LOCAL_WORLD_SIZE"])
        return local, int(os.environ.get("WORLD_SIZE", local))
    if ranks is None:
        tp = cfg.engine.tensor_parallel_size
        spare = gpus - (0 if cfg.engine.servers else tp)
        ranks = spare if spare >= 1 else max(1, gpus)
    return ranks, ranks


def plan_run(cfg: RunConfig, config_dir: str, *, gpus: int, gpu_bytes: int,
             ranks: int | None = None, gpu_name: str | None = None,
             work: Workload | None = None, recipe: str | None = None,
             node_cores: int = NODE_CORES) -> DryRun:
    """The dry run of `cfg` whose model's config.json is in `config_dir`; PlacementError when
    the ranks or the engine cannot be placed on `gpus` GPUs per node. `gpu_name`: the GPU model
    (a registered name, or the device's own name; default: by its memory); `work`: what a step
    asks for (default: the config's, with the stated mean lengths); `recipe`: for the launch
    line; `node_cores`: the CPU cores of a node (grading_load.py)."""
    shape = model_shape(config_dir)
    cfg, work = lora_plan(cfg, shape, work or workload(cfg))
    gpu = gpu_model(gpu_name, gpu_bytes) if gpus and gpu_bytes else None
    given = launch_ranks(gpus, cfg, ranks) if ranks is not None or launched() else None
    local, world, found = choose_ranks(cfg, shape, gpus=gpus, gpu_bytes=gpu_bytes, gpu=gpu,
                                       work=work, given=given,
                                       default=launch_ranks(gpus, cfg, ranks))
    cfg = searched_tp(cfg, found)
    e, o = cfg.engine, cfg.offpolicy
    placement = place(e, gpus, local)
    layout = trainer_layout(cfg, world)
    trainer = trainer_memory(shape, layout)
    try:
        e = sized_engine(shape, e, placement, gpu_bytes=gpu_bytes, context=work.context,
                         trainer=trainer)
    except PlacementError as err:  # e.g. a trainer rank on every GPU, the engine beside one
        raise PlacementError(f"{err}{best_split(found, recipe)}") from None
    kv_gib = e.kv_cache_gib or 0.0
    engine = {} if e.servers else engine_memory(shape, dtype=e.dtype, kv_gib=kv_gib, lora=e.lora,
                                                tp=e.tensor_parallel_size,
                                                max_tokens=e.max_model_len)
    if e.kv_cache_gib is None:  # sized from the engine GPU, and none is known
        engine.pop("kv_cache", None)
    kv_tokens = kv_gib * GIB / kv_bytes_per_token(shape, e.dtype, e.tensor_parallel_size)
    per_step = o.prompts_per_step * o.rollouts_per_prompt
    in_flight = planned_in_flight(cfg)
    shared = sum(engine.values()) if placement is not None and placement.shared else 0
    fit = micro_fit(shape, layout, work, usable(gpu_bytes, cfg.plan.memory_margin) - shared
                    ) if gpu_bytes else 0
    speed = plan_speed(shape, e, gpu, world=world, local=local, placement=placement,
                       work=work, found=found, in_flight=in_flight, recipe=recipe,
                       max_slowdown=cfg.plan.max_slowdown,
                       micro_tokens=bigger_micro(fit, o.micro_batch_tokens, e.max_model_len))
    return DryRun(model=cfg.policy.model, shape=shape, gpus=gpus, gpu_bytes=gpu_bytes,
                  ranks=world, placement=placement, layout=layout,
                  trainer=trainer, engine=engine,
                  engine_budget=int(e.memory_fraction * gpu_bytes),
                  kv_sequences=kv_tokens / e.max_model_len, rollouts_per_step=per_step,
                  in_flight=in_flight, publish_bytes=publish_bytes(shape, e), speed=speed,
                  engine_tp=e.tensor_parallel_size, margin=cfg.plan.memory_margin,
                  micro_fit=fit, grading=plan_grading(
                      cfg, speed.plan if speed else None, local=local, node_cores=node_cores,
                      engines=placement.engines if placement else 0, tp=e.tensor_parallel_size))


def place(e, gpus: int, local: int) -> Placement | None:
    """Which of `gpus` GPUs train (`local` ranks) and which generate, for engine config `e`
    (None: no GPUs, or engine.servers)."""
    if not gpus or e.servers:
        return None
    return plan_placement([str(i) for i in range(gpus)], local, e.tensor_parallel_size,
                          e.devices, exclusive=e.weight_transfer == "nccl",
                          engines=e.data_parallel_size)


def planned_in_flight(cfg: RunConfig) -> int:
    """Rollouts generating at once: PipelineRL's cap (rollout/pipeline.py `in_flight_prompts`:
    `offpolicy.max_in_flight` in whole prompts, by default the lag window), or PPO-offpolicy-k's
    k batches."""
    from scalerl.rollout.pipeline import in_flight_prompts

    o = cfg.offpolicy
    if o.mode != "pipelinerl":
        return o.prompts_per_step * o.rollouts_per_prompt * o.k
    prompts = in_flight_prompts(n=o.rollouts_per_prompt, groups_per_batch=o.prompts_per_step,
                                max_lag=o.max_lag, rollouts=o.max_in_flight)
    return prompts * o.rollouts_per_prompt


def config_dir(model: str) -> str:
    """The directory of `model`'s config.json: a local directory, the tiny model's, or a hub
    id's (that one file fetched, or read from the Hugging Face cache)."""
    from pathlib import Path

    from scalerl.models import TINY_MODELS

    if model in TINY_MODELS:
        from scalerl.models import resolve_model

        return resolve_model(model)
    if Path(model).is_dir():
        return model
    from huggingface_hub import hf_hub_download

    try:
        return str(Path(hf_hub_download(model, "config.json")).parent)
    except Exception as e:  # noqa: BLE001 - offline, no such repository, no network: one line
        raise ValueError(f"policy.model = {model!r}: no local directory, and its config.json "
                         f"could not be fetched or found in the Hugging Face cache "
                         f"({type(e).__name__}); give a directory holding config.json") from e


def table(run: DryRun) -> list[str]:
    """The per-GPU memory of a trainer rank and of the engine, part by part, in GiB."""
    parts = list(dict.fromkeys([*run.trainer, *run.engine]))
    lines = [f"{'GiB':<16}{'trainer rank':>14}{'engine':>10}"]
    for part in parts:
        t = f"{gib(run.trainer[part]):.1f}" if part in run.trainer else "-"
        g = f"{gib(run.engine[part]):.1f}" if part in run.engine else "-"
        lines.append(f"{part:<16}{t:>14}{g:>10}")
    engine_total = f"{gib(run.engine):.1f}" if run.engine else "-"
    lines.append(f"{'total':<16}{gib(run.trainer):>14.1f}{engine_total:>10}")
    return lines


def margin_lines(run: DryRun) -> list[str]:
    """The memory margin and what it leaves a micro-batch, as printed lines."""
    if not run.gpu_bytes:
        return []
    lines = [f"memory margin: plan.memory_margin {run.margin:g} -> {gib(run.usable):.1f} of "
             f"{gib(run.gpu_bytes):.1f} GiB per GPU planned; a trainer rank's peak "
             f"{gib(run.trainer):.1f} GiB leaves {gib(run.room - sum(run.trainer.values())):.1f}"
             " GiB"]
    t, setting = run.layout, f"offpolicy.micro_batch_tokens={run.micro_fit}"
    if run.micro_fit > t.micro_tokens:
        sets = run.speed is not None and setting in run.speed.launch
        lines.append(f"micro-batch: the memory left holds {run.micro_fit} tokens per micro-batch"
                     f" (now {t.micro_tokens}" + (f"): the launch line sets {setting} (fewer, "
                                                  "larger micro-batches)" if sets else
                                                  f"; {setting} with packed rows)"))
    return lines


def describe(run: DryRun) -> list[str]:
    """The dry run as printed lines."""
    s = run.shape
    lines = [f"model {run.model}: {s.params / 1e9:.3f}B parameters, {s.layers} layers, hidden "
             f"{s.hidden}, vocab {s.vocab}{', tied head' if s.tied else ''} (config.json, on "
             "meta)"]
    if run.placement is not None:
        lines.append(f"{run.gpus} GPUs x {gib(run.gpu_bytes):.1f} GiB; {run.placement.describe()}"
                     f"; {run.ranks} trainer ranks")
    elif run.gpus:
        lines.append(f"{run.gpus} GPUs x {gib(run.gpu_bytes):.1f} GiB, all training; the engine "
                     f"is on engine.servers; {run.ranks} trainer ranks")
    else:
        lines.append("no GPU seen or told of (--gpus N --gpu-gib G): the fit is not checked")
    t = run.layout
    how = (f"{t.padded_rows} rows padded to {t.micro_tokens // t.padded_rows}" if t.padded_rows
           else "rows packed")
    lines.append(f"micro-batch: {t.micro_tokens} tokens ({how}); per trainer rank, "
                 f"{'FSDP2 over ' + str(t.ranks) if t.sharded else 'whole'}:")
    lines += table(run)
    lines += balance_lines(run.shape, run.speed.workload if run.speed else None, run.ranks,
                           t.micro_tokens, packed=not t.padded_rows)
    lines += margin_lines(run)
    if run.engine:
        lines.append(f"engine: {gib(run.engine):.1f} GiB of its {gib(run.engine_budget):.1f} "
                     "GiB (engine.memory_fraction)" if run.engine_budget else
                     f"engine: {gib(run.engine):.1f} GiB")
    kv = (f"{run.kv_sequences:.1f} full-length sequences" if run.kv_sequences or not run.engine
          or "kv_cache" in run.engine else "from the engine GPU's memory (none told of)")
    lines.append(f"KV cache: {kv}; {run.rollouts_per_step} rollouts per step, "
                 f"{run.in_flight} in flight")
    lines.append(publish_line(run.publish_bytes, run.shape, run.layout))
    lines += speed_lines(run.speed) + grading_line(run.grading)
    lines.append(("fits" if run.gpu_bytes else "not checked") if not run.refusal
                 else run.refusal)
    return lines


def dry_run(cfg: RunConfig, *, gpus: int | None, gpu_gib: float | None,
            ranks: int | None = None, gpu_name: str | None = None,
            completion_tokens: int | None = None, prompt_tokens: int | None = None,
            recipe: str | None = None, completion_rms: float | None = None) -> DryRun:
    """The dry run on the GPUs told of, else on those this machine sees (PlacementError when
    the ranks or the engine cannot be placed); `gpu_name`: the GPU model (default: this
    machine's, else by `gpu_gib`), whose memory as CUDA reports it is taken when `gpu_gib` is
    not given and no GPU is seen; the mean lengths (and `completion_rms`, sqrt(E[L^2])): the
    throughput model's assumptions unless given."""
    if gpus is None:
        gpus = gpu_count()
    if gpus and (gpu_gib is None or gpu_name is None) and _cuda_devices():
        import torch

        props = torch.cuda.get_device_properties(0)
        gpu_gib = props.total_memory / GIB if gpu_gib is None else gpu_gib
        gpu_name = props.name if gpu_name is None else gpu_name
    if gpu_gib is None and gpu_name in GPUS:
        gpu_gib = GPUS[gpu_name].cuda_gib
    work = workload(cfg, completion_tokens=completion_tokens, prompt_tokens=prompt_tokens,
                    completion_rms=completion_rms)
    cores = len(os.sched_getaffinity(0)) if gpus and _cuda_devices() else NODE_CORES
    return plan_run(cfg, config_dir(cfg.policy.model), gpus=gpus,
                    gpu_bytes=int((gpu_gib or 0.0) * GIB), ranks=ranks, gpu_name=gpu_name,
                    work=work, recipe=recipe, node_cores=cores)


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


__all__ = ["DryRun", "PlacementError", "describe", "dry_run", "plan_run", "table"]
