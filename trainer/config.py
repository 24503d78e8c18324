"""The trainer's frozen config dataclasses; every field documented once, right under it.

Defaults are the ScaleRL paper's (Khatri et al. 2025, §4 and App. A.3) except where the paper is
silent, where the default chosen is documented on the field. Each dataclass checks its own fields
in `__post_init__`, so one built directly (a bench, a test, a library user) is checked exactly as
the run config is: a `FieldError` with one line per bad value, naming the field and what is
allowed. Names of losses, aggregations, normalisations and truncation policies are checked
against their registries (registering one is enough to use it). Rules across parts (the tasks,
the engine) live in `scalerl.config.validate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from scalerl.trainer.lora_config import LoraConfig

Rule = tuple[bool, str, str]
"""(ok, field name, what is allowed)."""


class FieldError(ValueError):
    """Bad values of one config dataclass, one line each: `section.field = value: allowed`."""

    def __init__(self, obj: Any, problems: list[tuple[str, str]]):
        self.obj, self.problems = obj, problems
        super().__init__(self.lines(getattr(obj, "SECTION", "")))

    def lines(self, section: str) -> str:
        """The problems with every field named under `section` (e.g. `optim`, `tasks[0]`)."""
        prefix = f"{section}." if section else ""
        return "\n".join(f"{prefix}{name} = {getattr(self.obj, name)!r}: {what}"
                         for name, what in self.problems)


def check_fields(obj: Any, rules: Iterable[Rule]) -> None:
    """Raise FieldError listing every rule of `obj` that fails."""
    problems = [(name, what) for ok, name, what in rules if not ok]
    if problems:
        raise FieldError(obj, problems)


def _in(registry: Any, value: str, field_name: str) -> Rule:
    return (value in registry, field_name,
            f"allowed: {', '.join(registry.names())} (the registered {registry.what} names)")


@dataclass(frozen=True)
class PolicyConfig:
    model: str = "tiny"
    """Hugging Face model directory or hub id (`Qwen/Qwen3-8B`: its snapshot in the Hugging Face
    cache, downloaded when missing unless HF_HUB_OFFLINE is set); `tiny` builds (or reuses) the
    tiny CPU model."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Trainer weights dtype. `auto`: fp32 weights, gradients and AdamW moments (16 bytes per
    parameter, divided over the ranks with `sharding: fsdp2`), computing in bf16 on GPU (autocast,
    or FSDP2's bf16 layers) and fp32 on CPU. `bfloat16`: weights, gradients and moments in bf16
    (8 bytes per parameter); updates smaller than bf16's resolution (~0.4% of a weight, so an
    lr of 5e-7) are lost. With LoRA (`lora.rank` > 0) it is the frozen base's dtype alone
    (`bfloat16`: 2 bytes per base parameter, nothing lost): the adapter, its gradients and its
    AdamW moments are fp32 whatever it is."""
    fp32_head: bool = True
    """Compute the LM head in FP32, in the trainer and in the generator alike (the paper's FP32
    fix, §3.2); the engine is started with the same setting."""
    head_operands: Literal["float32", "bfloat16"] = "float32"
    """The FP32 head's operands. `float32`: the hidden states and the fp32 master head weight
    as they are (a full fp32 matmul; slow on GPUs, where TF32 is off). `bfloat16`: both rounded
    to bf16, the products accumulated and returned in fp32: vLLM 0.32's FP32 head with a bf16
    engine (`torch.mm(bf16, bf16, out_dtype=float32)`), the sampler's own computation. Set it to
    engine.dtype; the mismatch KL of each is in docs/gpu.md. Unused without `fp32_head`."""
    temperature: float = 1.0
    """Sampling temperature; trainer logprobs are taken at the same temperature."""
    cpu_threads: int | None = 1
    """Torch threads of the trainer when it runs on CPU (None: torch's default, one per core).
    1 by default: beside vLLM's engine process and the verifier pool, one thread trains faster
    than two on a 2-core machine (docs/measurements.md). Ignored on GPU."""
    sharding: Literal["none", "fsdp2"] = "none"
    """How the trainer's ranks hold the model. `none`: every rank holds all of it (one process,
    or DDP under torchrun / `accelerate launch`). `fsdp2`: torch's FSDP2 (`fully_shard` on each
    decoder layer, then on the whole policy), the same code on CPU (gloo) and GPU (NCCL): each
    rank keeps 1/N of the fp32 weights, gradients and AdamW moments; on GPU the layers compute
    in bf16 (all-gathered in bf16, gradients reduced in fp32) and the embeddings and LM head stay
    fp32. Launch with torchrun or `accelerate launch` and a plain multi-GPU config (not an
    Accelerate FSDP or DeepSpeed one)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward instead of keeping them (one
    more forward of compute; activation memory of one layer instead of all)."""
    logit_chunk_tokens: int = 1024
    """Completion tokens whose LM-head logits are computed at once (forward and backward); the
    logits held are this x the vocabulary in fp32 (1024 x 152k = 0.6 GB), never the whole
    batch's. The values do not depend on it."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA: train adapters on a frozen base and publish only them (`policy.lora.rank` > 0;
    trainer/lora_config.py documents its fields)."""
    collective_timeout_s: float = 1800.0
    """Timeout of the trainer ranks' collectives (gradient reductions, all-gathers). Ranks that
    wait while rank 0 alone generates, validates, writes checkpoint files or publishes weights
    wait on a separate gloo group without this limit (a failed rank still ends the job:
    torchrun stops every rank when one exits)."""

    SECTION = "policy"

    def __post_init__(self) -> None:
        check_fields(self, [
            (self.temperature > 0, "temperature", "must be > 0"),
            (self.cpu_threads is None or self.cpu_threads >= 1, "cpu_threads",
             "must be >= 1 or null (torch default)"),
            (self.logit_chunk_tokens >= 1, "logit_chunk_tokens", "must be >= 1"),
            (self.collective_timeout_s > 0, "collective_timeout_s", "must be > 0"),
        ])


@dataclass(frozen=True)
class LossConfig:
    name: str = "cispo"
    """Surrogate, a registered loss (trainer.losses.LOSSES: cispo, grpo, dapo, gspo; paper §3.2,
    App. A.2)."""
    aggregation: str = "prompt"
    """How per-token losses are averaged, a registered aggregation (trainer.losses.AGGREGATIONS:
    prompt, sample, token; paper §3.2); ScaleRL: prompt."""
    eps_max: float | None = None
    """CISPO absolute cap on the importance ratio (None: the loss default, 4)."""
    clip_low: float | None = None
    """PPO/GSPO lower clip (None: the loss default: grpo/dapo 0.2, gspo 3e-3)."""
    clip_high: float | None = None
    """PPO/GSPO upper clip (None: the loss default: grpo 0.2, dapo 0.28, gspo 5e-3)."""
    length_norm: bool | None = None
    """GSPO: length-normalised sequence ratio (None: the loss default, True)."""

    SECTION = "loss"

    def __post_init__(self) -> None:
        from scalerl.trainer.losses import AGGREGATIONS, LOSSES

        check_fields(self, [
            _in(LOSSES, self.name, "name"), _in(AGGREGATIONS, self.aggregation, "aggregation"),
            (self.eps_max is None or self.eps_max > 0, "eps_max", "must be > 0"),
            (self.clip_low is None or 0 < self.clip_low < 1, "clip_low", "must be in (0, 1)"),
            (self.clip_high is None or self.clip_high > 0, "clip_high", "must be > 0"),
        ])


@dataclass(frozen=True)
class AdvantageConfig:
    normalise: str = "batch"
    """After group centring, a registered normalisation (trainer.advantages.NORMALISATIONS):
    divide by the batch std (`batch`, ScaleRL), the prompt std (`prompt`), or nothing
    (`none`)."""
    std_scope: Literal["filtered", "all"] = "filtered"
    """Rows whose spread sets the batch std: after zero-variance filtering, or all (the paper
    does not say which)."""
    eps: float = 1e-6
    """Added to the std before dividing."""
    correct_reward: float = 1.0
    """Reward of a `correct` verdict (paper App. A.3: +1)."""
    wrong_reward: float = -1.0
    """Reward of any other trained verdict (wrong, no_answer, timeout: -1). `error` verdicts
    are never trained on (filters.max_error_frac)."""

    SECTION = "advantages"

    @property
    def rewards(self):
        """The run's status -> reward map (trainer/rewards.py), the one the loop trains with."""
        from scalerl.trainer.rewards import RewardMap

        return RewardMap(self.correct_reward, self.wrong_reward)

    def __post_init__(self) -> None:
        from scalerl.trainer.advantages import NORMALISATIONS

        check_fields(self, [
            _in(NORMALISATIONS, self.normalise, "normalise"),
            (self.eps >= 0, "eps", "must be >= 0"),
            (self.correct_reward > self.wrong_reward, "correct_reward",
             f"must be greater than advantages.wrong_reward ({self.wrong_reward!r})"),
        ])


@dataclass(frozen=True)
class FilterConfig:
    zero_variance: bool = True
    """Drop prompts whose rollouts all scored alike, with no refilling (paper §3.2)."""
    retire: bool = True
    """No-Positive-Resampling: never sample again a prompt whose pass rate reached the
    threshold (POLARIS; paper §3.2)."""
    retire_threshold: float = 0.9
    """Pass rate at which a prompt is retired."""
    retire_history: Literal["last", "mean"] = "last"
    """Pass rate judged on the last observed group (TRL's reading) or the mean of all."""
    truncation: str = "drop"
    """Truncated rollouts (no answer within the hard cap), a registered policy
    (trainer.filters.TRUNCATION_POLICIES): `drop` them from the batch (the paper's "effective
    batch"), score them `wrong`, or `keep` the verifier's score."""
    max_error_frac: float = 0.1
    """Share of a step's rollouts with an `error` verdict (the verifier or the sandbox failed;
    such rollouts are never trained on) above which a step counts as failing; after
    `error_patience` failing steps in a row the run writes a checkpoint and stops, naming the
    tasks and the commonest error. 1.0 never stops."""
    error_patience: int = 3
    """Failing steps in a row (see `max_error_frac`) before the run stops."""

    SECTION = "filters"

    def __post_init__(self) -> None:
        from scalerl.trainer.filters import TRUNCATION_POLICIES

        check_fields(self, [
            _in(TRUNCATION_POLICIES, self.truncation, "truncation"),
            (0 < self.retire_threshold <= 1, "retire_threshold", "must be in (0, 1]"),
            (0 <= self.max_error_frac <= 1, "max_error_frac", "must be in [0, 1]"),
            (self.error_patience >= 1, "error_patience", "must be >= 1"),
        ])


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 5e-7
    """AdamW learning rate (paper: 5e-7 for the 8B model), constant after warm-up."""
    eps: float = 1e-15
    """AdamW epsilon (paper: 1e-15, avoids update clipping)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas (not stated by the paper; torch defaults)."""
    warmup_steps: int = 100
    """Linear warm-up steps from 0 to `lr`."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (not stated by the paper; 1.0); None disables clipping."""

    SECTION = "optim"

    def __post_init__(self) -> None:
        check_fields(self, [
            (self.lr > 0, "lr", "must be > 0"), (self.eps > 0, "eps", "must be > 0"),
            (self.weight_decay >= 0, "weight_decay", "must be >= 0"),
            (all(0 <= b < 1 for b in self.betas), "betas", "each in [0, 1)"),
            (self.warmup_steps >= 0, "warmup_steps", "must be >= 0"),
            (self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm",
             "must be > 0 or null"),
        ])


@dataclass(frozen=True)
class OffPolicyConfig:
    mode: Literal["ppo", "pipelinerl"] = "ppo"
    """`ppo`: PPO-offpolicy-k (generate k minibatches with one policy, take k steps, sync).
    `pipelinerl`: streaming generation with in-flight weight updates (PipelineRL-k)."""
    k: int = 1
    """PPO-offpolicy-k: optimizer steps per generation round (paper: 1 or 8); must be 1 with
    `pipelinerl`, whose staleness knob is `max_lag`."""
    max_lag: int = 8
    """PipelineRL-k: most policy versions a trained token may lag behind (paper: 8)."""
    prompts_per_step: int = 48
    """Prompts per optimizer step (paper: 48)."""
    rollouts_per_prompt: int = 16
    """Rollouts (group size) per prompt (paper: 16)."""
    micro_batch_size: int = 16
    """Completions per forward/backward when `micro_batch_tokens` is null; the step is exact
    whatever this is."""
    micro_batch_tokens: int | None = None
    """Most tokens (prompt + completion) of one forward/backward: rows are packed end to end
    without padding up to this many (a longer row gets a micro-batch of its own), and
    `micro_batch_size` is not used. None: `micro_batch_size` right-padded rows. The step is
    exact whatever this is; activation memory grows with it (`scalerl train --dry-run`)."""
    max_in_flight: int | None = None
    """PipelineRL-k: most rollouts generating at once (whole prompts; the engines' queue holds
    the ones they cannot run yet). None: 2x the sequences the engines decode at once (their
    `max_num_seqs`), at least one batch (prompts_per_step x rollouts_per_prompt), at most the
    lag window ((max_lag + 1) batches)."""
    batch_wait_s: float | None = None
    """PipelineRL-k: most seconds the trainer waits for one batch; None: no limit while
    generation makes progress (`stall_s`). Past it the run checkpoints and stops (exit 75;
    `--resume` regenerates the unfinished prompts)."""
    stall_s: float | None = 1800.0
    """PipelineRL-k: most seconds the trainer waits while no prompt's group completes and no
    token is generated; then the run checkpoints and stops as with `batch_wait_s`. None: no
    limit."""

    SECTION = "offpolicy"

    def __post_init__(self) -> None:
        check_fields(self, [
            (self.k >= 1, "k", "must be >= 1"),
            (self.mode != "pipelinerl" or self.k == 1, "k",
             "must be 1 with mode pipelinerl (its staleness knob is offpolicy.max_lag)"),
            (self.max_lag >= 0, "max_lag", "must be >= 0"),
            (self.prompts_per_step >= 1, "prompts_per_step", "must be >= 1"),
            (self.rollouts_per_prompt >= 2, "rollouts_per_prompt", "must be >= 2 (a group)"),
            (self.micro_batch_size >= 1, "micro_batch_size", "must be >= 1"),
            (self.micro_batch_tokens is None or self.micro_batch_tokens >= 1,
             "micro_batch_tokens", "must be >= 1 or null (micro_batch_size padded rows)"),
            (self.max_in_flight is None
             or self.max_in_flight >= self.prompts_per_step * self.rollouts_per_prompt,
             "max_in_flight", f"must be >= one batch, prompts_per_step x rollouts_per_prompt = "
             f"{self.prompts_per_step * self.rollouts_per_prompt}, or null (from the engines)"),
            (self.batch_wait_s is None or self.batch_wait_s > 0, "batch_wait_s",
             "must be > 0 or null (no limit while generation makes progress)"),
            (self.stall_s is None or self.stall_s > 0, "stall_s", "must be > 0 or null"),
        ])


@dataclass(frozen=True)
class ValConfig:
    every: int = 100
    """Held-out validation every N steps (and at step 0 and the end); 0 disables it."""
    n: int = 16
    """Rollouts per held-out prompt (mean@n; paper: 16)."""
    ks: tuple[int, ...] = (1,)
    """pass@k values reported."""
    limit: int | None = 1000
    """Held-out prompts per task (an evenly spaced subset in the task's order, so every level or
    source of a task is represented); None: the whole split."""
    split: str = "test"
    """Held-out split name."""
    temperature: float | None = None
    """Validation sampling temperature (None: the training temperature)."""
    servers: tuple[str, ...] = ()
    """vLLM servers (`scalerl serve`) for held-out validation alone: a validation step's
    weights go there and the trainer goes on while they are evaluated; the figures are logged
    at the step they belong to when they are in (`val/logged_at_step`). Empty: validation runs
    on the training generator and every trainer rank waits for it."""
    engine_share: float = 0.25
    """On the training generator under PipelineRL (whose training rollouts keep generating
    beside it): most fraction of each engine's running batch (`max_num_seqs`) that validation
    requests hold at once; the rest keeps serving training requests in their order. Validation
    goes first within its share (priority 0), so without a bound it took every slot as it freed:
    training requests queued on a server past `engine.server_request_timeout_s` were issued
    again from scratch. 1: no bound. Not used with `val.servers` or PPO-offpolicy (validation
    then has its engines to itself)."""

    SECTION = "val"

    def __post_init__(self) -> None:
        check_fields(self, [
            (self.every >= 0, "every", "must be >= 0 (0 disables validation)"),
            (self.n >= 1, "n", "must be >= 1"),
            (all(1 <= k <= self.n for k in self.ks), "ks", f"each in [1, val.n={self.n}]"),
            (self.limit is None or self.limit >= 1, "limit", "must be >= 1 or null"),
            (self.temperature is None or self.temperature >= 0, "temperature",
             "must be >= 0 or null"),
            (all(isinstance(u, str) and u.startswith(("http://", "https://"))
                 for u in self.servers), "servers", "URLs http://HOST:PORT"),
            (0 < self.engine_share <= 1, "engine_share", "must be in (0, 1]"),
        ])


@dataclass(frozen=True)
class LogConfig:
    trackers: tuple[str, ...] = ("tensorboard",)
    """Experiment trackers, Accelerate's own, several at once (trainer/trackers.py: tensorboard,
    wandb, trackio, mlflow, comet_ml, aim, clearml, dvclive, swanlab; `[]`: none); `scalerl
    train --log-with wandb,trackio` sets it. metrics.jsonl is written whatever this is; a
    tracker that cannot start is one warning and the run goes on (docs/tracking.md)."""
    project: str = "scalerl"
    """The trackers' project (W&B and trackio project, MLflow experiment)."""
    run_name: str | None = None
    """The run's name in the trackers (None: the run directory's name)."""
    tags: tuple[str, ...] = ()
    """Tags of the tracked run (W&B, MLflow)."""
    samples_every: int = 0
    """A table of rollouts (samples/step_NNNNNN.jsonl, and to the trackers that take tables) at
    every validation step and also every N steps; 0: at validation steps only."""
    samples_per_task: int = 4
    """Rollouts per task in each samples table; 0: no samples."""
    progress: bool = True
    """Show a rich progress line."""
    truncation_warn: float = 0.05
    """Warn when the truncated fraction of a step passes this (paper: 10-15% destabilises)."""

    SECTION = "log"

    def __post_init__(self) -> None:
        from scalerl.trainer.trackers import TRACKERS

        unknown = [t for t in self.trackers if t not in TRACKERS]
        check_fields(self, [
            (not unknown, "trackers", f"allowed: {', '.join(TRACKERS.names())} (Accelerate's "
                                      "trackers)"),
            (len(set(self.trackers)) == len(self.trackers), "trackers", "each at most once"),
            (bool(self.project.strip()), "project", "must not be empty"),
            (self.run_name is None or bool(self.run_name.strip()), "run_name",
             "must not be empty (null: the run directory's name)"),
            (self.samples_every >= 0, "samples_every", "must be >= 0 (0: validation steps)"),
            (self.samples_per_task >= 0, "samples_per_task", "must be >= 0 (0: no samples)"),
            (0 <= self.truncation_warn <= 1, "truncation_warn", "must be in [0, 1]"),
        ])


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 100
    """Checkpoint every N optimizer steps (and at the end); 0: only at the end."""
    every_s: float = 0.0
    """Also checkpoint at the first step boundary at least this many seconds after the last
    checkpoint (0: off). At the recipe's scale 100 steps are days apart: e.g. 3600 bounds what
    a crash loses to an hour."""
    keep: int = 2
    """Most recent checkpoints kept."""

    SECTION = "checkpoint"

    def __post_init__(self) -> None:
        check_fields(self, [(self.every >= 0, "every", "must be >= 0"),
                            (self.every_s >= 0, "every_s", "must be >= 0 seconds"),
                            (self.keep >= 1, "keep", "must be >= 1")])


@dataclass(frozen=True)
class TrainerConfig:
    steps: int = 1000
    """Optimizer steps to run."""
    seed: int = 0
    """Seeds the prompt sampler, generation and torch."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The trained model: path, dtype, FP32 head, temperature."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Surrogate loss and aggregation."""
    advantages: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Rewards and advantage normalisation."""
    filters: FilterConfig = field(default_factory=FilterConfig)
    """Zero-variance filter, No-Positive-Resampling, truncated rollouts."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """AdamW, warm-up and gradient clipping."""
    offpolicy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    """Off-policy mode and batch shape."""
    val: ValConfig = field(default_factory=ValConfig)
    """Held-out validation."""
    log: LogConfig = field(default_factory=LogConfig)
    """Metrics outputs: experiment trackers, rollout samples, the console."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint cadence."""

    SECTION = ""

    def __post_init__(self) -> None:
        check_fields(self, [(self.steps > 0, "steps", "must be > 0")])
        lost = "" if self.policy.lora.enabled else lost_updates(self.policy.dtype, self.optim.lr)
        if lost:
            raise FieldError(self.policy, [("dtype", lost)])


SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11}
"""Significant bits of a 16-bit master weight, the implicit one included: bfloat16 stores 7
fraction bits (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training", §2),
float16 10 (IEEE 754-2008 binary16)."""
TYPICAL_WEIGHT = 0.02
"""|w| of a typical weight: Qwen3's and Qwen2.5's config.json `initializer_range`."""


def lost_updates(dtype: str, lr: float) -> str:
    """Why master weights in `dtype` would lose every AdamW update at `lr` ("" when they keep
    them): AdamW moves a weight by about lr a step (Kingma & Ba 2015, §2.1: the step is bounded
    by the learning rate), and round-to-nearest drops a change below half a unit in the last
    place, which is at least 2^-(bits + 1) x |w| (bf16: 2^-9 |w|)."""
    bits = SIGNIFICANT_BITS.get(dtype)
    floor = None if bits is None else TYPICAL_WEIGHT * 2.0 ** -(bits + 1)
    if floor is None or lr >= floor:
        return ""
    return (f"master weights in {dtype} ({bits} significant bits) lose every AdamW update at "
            f"optim.lr = {lr:g}: a step of about lr is below half an ulp of a weight of "
            f"|w| = {TYPICAL_WEIGHT:g} (2^-{bits + 1} x |w| = {floor:.2g}) "
            "and rounds away; use policy.dtype auto (fp32 master weights, bf16 compute)")
