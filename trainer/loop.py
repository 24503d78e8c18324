"""The RL training loop on Accelerate: PPO-offpolicy-k and PipelineRL-k behind one source.

`train()` reads top to bottom: set up, validate at step 0, then per step take groups from the
rollout source, filter and collate them, take one exact optimizer step, hand the new weights to the
source, log (metrics.jsonl at once; at validation steps a samples table too), validate, send the
step whole to the experiment trackers (rank 0 only: trainer/tracking.py) and checkpoint. The
source (`SOURCES[offpolicy.mode]`) decides when generation happens and when weights reach the
generator. Verifier failures (`error` verdicts) are never trained on; when they pass
`filters.max_error_frac` for `filters.error_patience` steps in a row the loop checkpoints and
stops early, with the reason in `Run.stopped`. When generation becomes unavailable
(GeneratorUnavailable: no vLLM server left, or a publish of new weights failed) every rank
learns it from rank 0, and the loop checkpoints and raises RunStopped; so does a stop asked by a
signal, mid-step (the step dropped, the last completed one saved as it was) or at a boundary.
Building the model, the generator and the tasks is the glue's (scalerl/training.py); this module
never imports vLLM.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.trainer.balance import model_attention_cost
from scalerl.trainer.batch import GroupReport, TrainBatch, collate, prepare_groups
from scalerl.trainer.checkpoint import (
    clear_optimizer_staging,
    load_sharded_optimizer,
    load_state,
    rng_state,
    save_checkpoint,
    save_sharded_optimizer,
    set_rng_state,
)
from scalerl.trainer.config import TrainerConfig
from scalerl.trainer.filters import ErrorWatch, Group, PromptRetirement
from scalerl.trainer.lora import full_weight_bytes, published_weights
from scalerl.trainer.losses import loss_kwargs
from scalerl.trainer.metrics import ComputeClock, MetricsWriter, step_metrics, truncate_jsonl
from scalerl.trainer.packing import use_varlen_attention
from scalerl.trainer.pipeline_source import PipelineSource
from scalerl.trainer.policy import PolicyModule, hf_model
from scalerl.trainer.publish import Publisher
from scalerl.trainer.run import Run, TrainTask
from scalerl.trainer.sampler import TaskSampler
from scalerl.trainer.samples import sample_rows, truncate_samples
from scalerl.trainer.sharding import gather_weights, is_sharded
from scalerl.trainer.sources import PPOOffPolicy, RolloutSource, SourceSettings
from scalerl.trainer.step import StepSettings, train_step
from scalerl.trainer.stopping import (
    STOPPED,
    Boundary,
    Preempted,
    StepAbandoned,
    StopRequest,
    clock_due,
    write_stop_record,
)
from scalerl.trainer.tracking import start_tracking
from scalerl.trainer.validation import (
    BackgroundValidation,
    log_validations,
    revalidate,
    validate_heldout,
)
from scalerl.trainer.waiting import broadcast_from_rank0, wait_for_rank0
from scalerl.trainer.wire import light_groups, share_batch

SOURCES: dict[str, Callable[..., RolloutSource]] = {"ppo": PPOOffPolicy,
                                                   "pipelinerl": PipelineSource}
"""offpolicy.mode -> rollout source factory(generator, sampler, SourceSettings)."""


# ---------------------------------------------------------------------------------------------
# The loop.

def train(cfg: TrainerConfig, *, model, tokenizer, generator, tasks: Mapping[str, TrainTask],
          run_dir: Path, accelerator, resume_from: Path | None = None,
          publisher: Publisher | None = None, devices: int | None = None,
          description: Mapping[str, Any] | None = None, stop: StopRequest | None = None,
          validator: BackgroundValidation | None = None) -> Run:
    """Run `cfg.steps` optimizer steps (from a checkpoint when `resume_from`); returns the run.

    `model`: a Hugging Face model or a `PolicyModule` (already sharded when
    `policy.sharding: fsdp2`). `publisher` hands new weights to the generator (default: its own
    `update_weights`). `devices`: the devices the run holds, for the compute axis (None: one per
    trainer process plus one for the generator). `description`: what the experiment trackers
    record of the run when it starts (the glue's: config, recipe, model, tasks, versions).
    `stop`: set by the process's signal handlers; once it is set the run stops (RunStopped)
    at the next micro-batch, wait for a batch or step boundary, with a checkpoint of the last
    completed step (trainer/stopping.py). `validator` (rank 0, `val.servers`): held-out
    validation on a generator of its own while training goes on (trainer/validation.py).
    """
    run = setup(cfg, model, tokenizer, generator, tasks, Path(run_dir), accelerator, publisher,
                devices, description)
    run.stop = stop or StopRequest()
    run.validator = validator
    if resume_from is not None:
        restore(run, resume_from)
    run.stop.arm()
    if hasattr(run.source, "stop"):  # PipelineRL's wait for a batch ends on a stop request
        run.source.stop = lambda: run.stop.reason
    try:
        loop(run)
    except (GeneratorUnavailable, StepAbandoned, Preempted) as exc:
        raise stopped(run, exc) from exc
    finish(run)
    return run


def stopped(run: Run, exc: Exception) -> RunStopped:
    """Every rank, on a stop with a checkpoint: write what it keeps (GeneratorUnavailable: the
    state now; StepAbandoned: the last completed step as it was; Preempted: the loop wrote the
    step), leave stopped.json (before closing the source, which a launcher's SIGKILL may cut
    short), close; the RunStopped to raise."""
    where = f"a checkpoint is written under {run.run_dir}/checkpoints: continue with --resume"
    if isinstance(exc, GeneratorUnavailable) and run.stop.reason is not None:
        checkpoint(run)  # torchrun signals each worker's process group: an in-process engine's
        message = (f"stopped at step {run.step} on {run.stop.reason} (the signal stopped the "
                   f"generator too: {exc}): {where}")  # core process is in rank 0's
    elif isinstance(exc, GeneratorUnavailable):  # e.g. no vLLM server left: keep what we have
        checkpoint(run)
        message = f"stopped at step {run.step}: {exc}; {where} once generation is back"
    elif isinstance(exc, StepAbandoned):
        if run.saved_step != run.step:  # (its boundary may have written it already)
            checkpoint(run, state=run.last_step)
        reason = run.stop.reason or "a stop asked on another rank"
        message = (f"stopped at step {run.step} on {reason} (the next step was dropped at "
                   f"{exc}): {where}")
    else:
        message = f"stopped at step {run.step} on {exc}: {where}"
    if run.accelerator.is_main_process:
        write_stop_record(run.run_dir, step=run.step, reason=message, exit_code=STOPPED)
    finish(run, drain=False)
    return RunStopped(message, step=run.step)


class RunStopped(RuntimeError):
    """The run stopped before its last step with a checkpoint written; `--resume` continues."""

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step
        """The step checkpointed (the resumed run's first step is the next one)."""


def loop(run: Run) -> None:
    """Validate at step 0, then step, publish, log, validate and checkpoint to `cfg.steps` (or
    until verifier errors stop the run)."""
    cfg = run.cfg
    if run.step == 0:
        validate_everywhere(run)
        end_step(run)
    while run.step < cfg.steps:
        run.last_step = trainer_state(run, later=True)  # what a stop before the update saves
        t0 = time.perf_counter()
        groups, gen_metrics = next_groups(run)
        kept, report = filter_groups(run, groups)
        t1 = time.perf_counter()
        stats = optimise(run, kept, report)
        step_s = time.perf_counter() - t1  # the optimizer step alone: publishing is sync_s
        run.train_s += step_s
        run.step += 1
        try:
            hand_weights(run)
            unpublished = None
        except GeneratorUnavailable as exc:  # raised once the step is logged whole
            unpublished = exc
        run.loop_s += time.perf_counter() - t0
        log_step(run, groups, report, gen_metrics, stats, step_s)
        log_validations(run)
        if unpublished is not None:  # train() checkpoints the step
            end_step(run)
            raise unpublished
        stop = stop_for_errors(run, groups)
        if not stop and validation_due(run):
            validate_everywhere(run)
        run.step_weights = None  # sent and validated: a gathered copy is not held into the next
        # step (the rollout source keeps its own reference only until it has sent them)
        end_step(run)  # the trackers get the step whole, before its checkpoint
        here = boundary(run)
        if (stop or here.stop or here.save or due(run.step, cfg.checkpoint.every)
                or run.step == cfg.steps):
            checkpoint(run)
        if here.stop and run.step < cfg.steps:
            raise Preempted(here.stop)
        if stop:
            break


def boundary(run: Run) -> Boundary:
    """Rank 0's decision at the end of a step, on every rank: stop here (a signal asked for
    it) and whether a checkpoint is due by the clock (`checkpoint.every_s`)."""
    here = None
    if run.accelerator.is_main_process:
        here = Boundary(stop=run.stop.reason,
                        save=clock_due(run.saved_at, run.cfg.checkpoint.every_s))
    return broadcast_from_rank0(here)


def stop_for_errors(run: Run, groups: list[Group]) -> bool:
    """True once verifier errors passed `filters.max_error_frac` for `filters.error_patience`
    steps in a row (the loop then checkpoints); `run.stopped` says which tasks and why."""
    run.stopped = run.errors.observe(groups) or ""
    return bool(run.stopped)


def validation_due(run: Run) -> bool:
    """Held-out validation after this step: every `val.every` steps and at the last."""
    return run.cfg.val.every > 0 and (due(run.step, run.cfg.val.every)
                                      or run.step == run.cfg.steps)


def due(step: int, every: int) -> bool:
    return every > 0 and step % every == 0


def unwrap(run: Run):
    """The Hugging Face model being trained (outside DDP/FSDP and the PolicyModule)."""
    return hf_model(run.accelerator.unwrap_model(run.model))


# ---------------------------------------------------------------------------------------------
# Set-up and restore.

def setup(cfg: TrainerConfig, model, tokenizer, generator, tasks: Mapping[str, TrainTask],
          run_dir: Path, accelerator, publisher: Publisher | None = None,
          devices: int | None = None, description: Mapping[str, Any] | None = None) -> Run:
    torch.manual_seed(cfg.seed)
    o = cfg.optim
    model = model if isinstance(model, PolicyModule) else PolicyModule(model)
    if cfg.offpolicy.micro_batch_tokens is not None:  # packed rows: attend within each
        use_varlen_attention(hf_model(model))
    trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapter alone
    optimizer = torch.optim.AdamW(trainable, lr=o.lr, betas=o.betas, eps=o.eps,
                                  weight_decay=o.weight_decay)
    warmup = o.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0)
    if not is_sharded(model):  # FSDP2 shards itself (trainer/sharding.py); DDP comes from here
        model, optimizer = accelerator.prepare(model, optimizer)
    f = cfg.filters
    retirement = PromptRetirement(f.retire_threshold, f.retire_history, enabled=f.retire)
    source = None
    if accelerator.is_main_process:
        source = SOURCES[cfg.offpolicy.mode](generator, make_sampler(cfg, tasks, retirement),
                                             source_settings(cfg, tasks), publisher)
    writer = None
    if accelerator.is_main_process:  # only rank 0 writes metrics and talks to the trackers
        writer = MetricsWriter(run_dir, total_steps=cfg.steps, progress=cfg.log.progress,
                               tracking=start_tracking(cfg.log, run_dir, description or {}))
    if devices is None:
        devices = accelerator.num_processes + (generator is not None)
    clock = ComputeClock(devices, on_gpu=accelerator.device.type == "cuda")
    errors = ErrorWatch(f.max_error_frac, f.error_patience)
    return Run(cfg, accelerator, model, tokenizer, optimizer, scheduler, source, retirement,
               clock, writer, tasks, run_dir, generator, errors)


def make_sampler(cfg: TrainerConfig, tasks: Mapping[str, TrainTask],
                 retirement: PromptRetirement) -> TaskSampler:
    samples = {name: t.task.samples("train") for name, t in tasks.items()}
    weights = {name: t.weight for name, t in tasks.items()}
    return TaskSampler(samples, weights, seed=cfg.seed, is_retired=retirement.is_retired)


def source_settings(cfg: TrainerConfig, tasks: Mapping[str, TrainTask]) -> SourceSettings:
    o = cfg.offpolicy
    return SourceSettings(budgets={n: t.budget for n, t in tasks.items()},
                          prompts_per_step=o.prompts_per_step,
                          rollouts_per_prompt=o.rollouts_per_prompt,
                          temperature=cfg.policy.temperature, seed=cfg.seed, k=o.k,
                          max_lag=o.max_lag, max_in_flight=o.max_in_flight,
                          batch_wait_s=o.batch_wait_s, stall_s=o.stall_s)


def restore(run: Run, path: Path) -> None:
    """Load everything but the model weights (the glue loaded the model from `path`)."""
    state = load_state(path)
    if is_sharded(run.model):
        load_sharded_optimizer(run.model, run.optimizer, path)
    else:
        run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.retirement.load_state_dict(state["retirement"])
    run.clock.load_state_dict(state["clock"])
    run.step = run.saved_step = int(state["step"])
    run.train_s, run.loop_s = state["train_s"], state["loop_s"]
    run.validations = list(state["validations"])
    if run.source is not None:
        run.source.load_state_dict(state["source"])
    hand_weights(run)  # tags the version
    revalidate(run, state.get("val_pending", []))
    if run.writer is not None:
        truncate_jsonl(run.writer.path, run.step)
        truncate_samples(run.run_dir, run.step)
    set_rng_state(state["rng"])


def trainer_state(run: Run, later: bool = False) -> dict[str, Any] | None:
    """Rank 0: the checkpoint's state besides the weights and the optimizer, copied now (the
    RNG states included); None on the other ranks (only rank 0 writes it). `later`: the
    source's state as a snapshot, serialised by `checkpoint` (PipelineRL's buffer of rollouts
    takes seconds, the copy of its references none)."""
    if not run.accelerator.is_main_process:
        return None
    source = run.source.snapshot() if later else run.source.state_dict()
    return {"scheduler": run.scheduler.state_dict(),
            "retirement": run.retirement.state_dict(), "clock": run.clock.state_dict(),
            "source": source, "train_s": run.train_s, "loop_s": run.loop_s,
            "validations": list(run.validations),
            "val_pending": list(run.validator.pending) if run.validator is not None else [],
            "rng": rng_state()}


def checkpoint(run: Run, state: dict[str, Any] | None = None) -> None:
    """Every rank: wait for rank 0 (it may still be validating), then a sharded policy's full
    weights are gathered and each rank writes its optimizer shard; rank 0 writes the rest:
    `state` (a `trainer_state` taken earlier: the weights and optimizer are still that step's),
    else the state now."""
    main, sharded = run.accelerator.is_main_process, is_sharded(run.model)
    if main and sharded:
        clear_optimizer_staging(run.run_dir, run.step)
    wait_for_rank0()
    run.saved_step = run.step
    weights = None
    if sharded:
        weights = gather_weights(run.model)
        save_sharded_optimizer(run.model, run.optimizer, run.run_dir, run.step)
    if not main:
        return
    optimizer = None if sharded else run.optimizer.state_dict()  # sharded: saved per rank
    state = {"optimizer": optimizer, **(state or trainer_state(run))}
    if callable(state["source"]):  # a snapshot taken at the step's start
        state["source"] = state["source"]()
    save_checkpoint(run.run_dir, run.step, unwrap(run), run.tokenizer, state,
                    keep=run.cfg.checkpoint.keep, state_dict=weights, lora=lora_serving(run.cfg))
    run.saved_at = time.monotonic()


def hand_weights(run: Run) -> None:
    """Every rank, after a step: the weights of policy version `run.step` go to rank 0's rollout
    source. A whole policy is read lazily, when the source sends it; a sharded one is gathered
    now, by all ranks together, but only when they will be sent (`weights_due`), each tensor
    kept by rank 0 in its publisher's form (the engine's dtype, cast on the device). A source
    that publishes at once and fails (a PublishError) raises it on every rank."""
    if not is_sharded(run.model):
        weights = lambda: published_weights(unwrap(run))  # LoRA: the adapter alone
    elif broadcast_from_rank0(weights_due(run)):
        publisher = getattr(run.source, "publisher", None)
        full = gather_weights(run.model, prepare=getattr(publisher, "prepare", None))
        weights = lambda: iter(full.items())
    else:
        step = run.step
        weights = lambda: not_gathered(step)
    run.step_weights = weights
    on_rank0(run, lambda: run.source.on_step(run.step, weights))


def lora_serving(cfg: TrainerConfig):
    """A LoRA run's adapters as the engine serves them (None: full fine-tuning): one per weight
    version, `max_lag` + 1 loaded under PipelineRL (every version a rollout in flight may still
    be sampling under), 2 under PPO-offpolicy (a round samples under one version)."""
    lora, o = cfg.policy.lora, cfg.offpolicy
    if not lora.enabled:
        return None
    return lora.serving(max_loras=o.max_lag + 1 if o.mode == "pipelinerl" else 2)


def on_rank0(run: Run, work: Callable[[], Any]) -> Any:
    """Rank 0 (the rank with the rollout source) does `work`; every rank returns its result, or
    raises its GeneratorUnavailable, so that all stop together (a rank left waiting for the
    next batch while rank 0 checkpoints alone would hang). The other ranks wait outside the
    trainer's collective timeout: generation can take hours."""
    payload: Any = None
    if run.source is not None:
        try:
            payload = work()
        except (GeneratorUnavailable, StepAbandoned) as exc:
            payload = exc
    payload = broadcast_from_rank0(payload)
    if isinstance(payload, (GeneratorUnavailable, StepAbandoned)):
        raise payload
    return payload


def weights_due(run: Run) -> bool | None:
    """Rank 0: whether this step's weights will reach the generator (its source sends them, or
    held-out validation comes next); None on the other ranks (they receive rank 0's answer)."""
    if run.source is None:
        return None
    v = run.cfg.val
    validating = v.every > 0 and (due(run.step, v.every) or run.step == run.cfg.steps)
    return run.source.wants_weights() or validating


def not_gathered(step: int):
    raise RuntimeError(f"the weights of step {step} were not gathered: the rollout source said "
                       "it would not send them (RolloutSource.wants_weights)")


# ---------------------------------------------------------------------------------------------
# One step.

def next_groups(run: Run) -> tuple[list[Group], dict[str, float]]:
    """Rank 0 asks the source; every rank receives the same groups (or its
    GeneratorUnavailable), the other ranks without their per-token fields: they train on the
    batch rank 0 collates (`optimise`, trainer/wire.py)."""
    full: list = []

    def work():
        full.append(run.source.next_groups(run.step))
        groups, metrics = full[0]
        return light_groups(groups), metrics
    light = on_rank0(run, work)
    return full[0] if full else light


def filter_groups(run: Run, groups: list[Group]) -> tuple[list[Group], GroupReport]:
    f = run.cfg.filters
    return prepare_groups(groups, truncation=f.truncation, rewards=run.cfg.advantages.rewards,
                          zero_variance_filter=f.zero_variance, retirement=run.retirement)


def optimise(run: Run, kept: list[Group], report: GroupReport) -> dict[str, float]:
    """One optimizer step on the kept groups (a step with no groups only advances the schedule)."""
    cfg = run.cfg
    if not kept:
        run.scheduler.step()
        return {"batch/empty": 1.0}
    batch = global_batch(run, kept, report)
    stats = train_step(run.accelerator, run.model, run.optimizer, run.scheduler, batch,
                       step_settings(cfg, unwrap(run)), stop=lambda: run.stop.reason is not None)
    stats["tokens_total"] = float(batch.num_tokens)
    return stats


def global_batch(run: Run, kept: list[Group], report: GroupReport) -> TrainBatch:
    """The step's whole batch on every rank: rank 0 collates it from its rollouts (the others
    hold them without their tokens) and broadcasts its tensors (trainer/wire.py)."""
    a, batch = run.cfg.advantages, None
    if run.source is not None:
        batch = collate(kept, normalise=a.normalise, aggregation=run.cfg.loss.aggregation,
                        pad_id=pad_id(run.tokenizer), eps=a.eps,
                        zero_rows=report.zero_variance_rollouts if a.std_scope == "all" else 0)
    return share_batch(batch, rows=sum(len(g) for g in kept))


def step_settings(cfg: TrainerConfig, model=None) -> StepSettings:
    """The plain values `train_step` takes, from the config (also `scalerl bench train`'s) and
    the Hugging Face `model`'s shape (rows' attention cost; none given: tokens only)."""
    loss = cfg.loss
    return StepSettings(
        loss=loss.name, micro_batch_size=cfg.offpolicy.micro_batch_size,
        loss_kwargs=loss_kwargs(loss.name, {"eps_max": loss.eps_max, "clip_low": loss.clip_low,
                                            "clip_high": loss.clip_high,
                                            "length_norm": loss.length_norm}),
        temperature=cfg.policy.temperature, fp32_head=cfg.policy.fp32_head,
        max_grad_norm=cfg.optim.max_grad_norm,
        micro_batch_tokens=cfg.offpolicy.micro_batch_tokens,
        attention_cost=0.0 if model is None else model_attention_cost(model))


def pad_id(tokenizer) -> int:
    pid = getattr(tokenizer, "pad_token_id", None)
    return int(pid if pid is not None else tokenizer.eos_token_id)


# ---------------------------------------------------------------------------------------------
# Metrics, validation, the end.

def log_step(run: Run, groups: list[Group], report: GroupReport, gen: dict[str, float],
             stats: dict[str, float], train_s: float) -> None:
    """Rank 0 writes the step's metrics with the compute axis; warns on too many truncated
    rollouts and (once per task) on prompts too long for the engine."""
    if run.writer is None:
        return
    prompts = sum(len(t.task.samples("train")) for t in run.tasks.values())
    metrics = step_metrics(groups, report, gen, stats, train_s=train_s, prompts=prompts,
                           retired=len(run.retirement.retired),
                           lr=run.scheduler.get_last_lr()[0])
    gen_tokens = sum(len(r.token_ids) for g in groups for r in g)
    metrics |= run.clock.tick(gen_tokens, int(stats.get("train_tokens", 0)))
    if "rollout/sync_bytes" in metrics and "rollout/sync_full_bytes" not in metrics:
        metrics["rollout/sync_full_bytes"] = float(full_bytes(run))  # a full run's: the same
    run.writer.log(run.step, metrics)
    log_samples(run, groups, report)
    trunc = metrics.get("rollout/truncated_frac", 0.0)
    if trunc > run.cfg.log.truncation_warn:
        run.writer.print(f"[yellow]warning:[/] step {run.step}: {trunc:.1%} of rollouts truncated "
                         f"(> {run.cfg.log.truncation_warn:.0%}; the paper saw 10-15% destabilise "
                         "runs)")
    warn_too_long(run, metrics)


def full_bytes(run: Run) -> int:
    """Bytes a full-weight publish of the run's model moves: the LoRA publisher's figure (the
    base's files in the engine's dtype), else the model's weights in the publisher's dtype."""
    publisher = getattr(run.source, "publisher", None)
    full = getattr(publisher, "full_model_bytes", None)
    return full if full is not None else full_weight_bytes(unwrap(run),
                                                           getattr(publisher, "dtype", None))


def log_samples(run: Run, groups: list[Group], report: GroupReport) -> None:
    """At validation steps and every `log.samples_every` steps: `log.samples_per_task` of the
    step's rollouts per task, with their rewards (samples/step_NNNNNN.jsonl, tracker tables)."""
    log = run.cfg.log
    if log.samples_per_task == 0 or not (validation_due(run) or due(run.step, log.samples_every)):
        return
    rows = sample_rows(groups, report.rewarded, step=run.step, trainer_version=run.step - 1,
                       per_task=log.samples_per_task,
                       decode=lambda ids: run.tokenizer.decode(list(ids)))
    run.writer.samples(run.step, rows)


def end_step(run: Run) -> None:
    """Rank 0 sends the step's figures, validation and samples to the trackers, once."""
    if run.writer is not None:
        run.writer.end_step(run.step)


def warn_too_long(run: Run, metrics: dict[str, float]) -> None:
    """One warning per task whose prompts do not fit `max_model_len` (they are skipped)."""
    prefix = "rollout/prompt_too_long/"
    for key in sorted(k for k in metrics if k.startswith(prefix)):
        task = key[len(prefix):]
        if task not in run.warned_too_long:
            run.warned_too_long.add(task)
            message = (f"step {run.step}: task {task} has prompts too long for the engine's "
                       "max_model_len with their budget; they are skipped (counted in "
                       "rollout/prompt_too_long): raise engine.max_model_len or lower the budget")
            warnings.warn(message, stacklevel=1)
            run.writer.print(f"[yellow]warning:[/] {message}")


def validate_everywhere(run: Run) -> None:
    """Held-out validation (rank 0 generates); its GeneratorUnavailable stops every rank."""
    on_rank0(run, lambda: validate_heldout(run))


def finish(run: Run, drain: bool = True) -> None:
    """Close the writer and the source; first, with `drain`, wait for a background
    validation in flight and log it (a run that stops early keeps it in its checkpoint)."""
    if drain and run.validator is not None:
        run.validator.wait()
        log_validations(run)
        end_step(run)
    if run.writer is not None:
        run.writer.close()
    if run.source is not None:
        run.source.close()
