"""The trainer's frozen config dataclasses; every field documented once, right under it.

Defaults are the ScaleRL paper's (Khatri et al. 2025, §4 and App. A.3) except where the paper is
silent, where the default chosen is documented on the field. Cross-field checks live in
`scalerl.config.validate`, which runs once at start-up; this module only declares shapes and
allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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
    lr of 5e-7) are lost."""
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
    1 by default: beside vLLM's engine process and the verifier pool, one thread measured 2.4x
    the tokens/s of two on 2 cores. Ignored on GPU."""
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
    collective_timeout_s: float = 1800.0
    """Timeout of the trainer ranks' collectives (gradient reductions, all-gathers). Ranks that
    wait while rank 0 alone generates, validates, writes checkpoint files or publishes weights
    wait on a separate gloo group without this limit (a failed rank still ends the job:
    torchrun stops every rank when one exits)."""


@dataclass(frozen=True)
class LossConfig:
    name: Literal["cispo", "grpo", "dapo", "gspo"] = "cispo"
    """Surrogate, a key of trainer.losses.LOSSES (paper §3.2, App. A.2)."""
    aggregation: Literal["prompt", "sample", "token"] = "prompt"
    """How per-token losses are averaged (paper §3.2); ScaleRL: prompt."""
    eps_max: float | None = None
    """CISPO absolute cap on the importance ratio (None: the loss default, 4)."""
    clip_low: float | None = None
    """PPO/GSPO lower clip (None: the loss default: grpo/dapo 0.2, gspo 3e-3)."""
    clip_high: float | None = None
    """PPO/GSPO upper clip (None: the loss default: grpo 0.2, dapo 0.28, gspo 5e-3)."""
    length_norm: bool | None = None
    """GSPO: length-normalised sequence ratio (None: the loss default, True)."""


@dataclass(frozen=True)
class AdvantageConfig:
    normalise: Literal["batch", "prompt", "none"] = "batch"
    """After group centring: divide by the batch std (ScaleRL), the prompt std, or nothing."""
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
    truncation: Literal["drop", "wrong", "keep"] = "drop"
    """Truncated rollouts (no answer within the hard cap): `drop` them from the batch (the
    paper's "effective batch"), score them `wrong`, or `keep` the verifier's score."""
    max_error_frac: float = 0.1
    """Share of a step's rollouts with an `error` verdict (the verifier or the sandbox failed;
    such rollouts are never trained on) above which a step counts as failing; after
    `error_patience` failing steps in a row the run writes a checkpoint and stops, naming the
    tasks and the commonest error. 1.0 never stops."""
    error_patience: int = 3
    """Failing steps in a row (see `max_error_frac`) before the run stops."""


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

    def __post_init__(self) -> None:
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(f"OffPolicyConfig.micro_batch_tokens = {self.micro_batch_tokens}: "
                             "must be >= 1 or null (micro_batch_size padded rows)")


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


@dataclass(frozen=True)
class LogConfig:
    tensorboard: bool = True
    """Write TensorBoard scalars under <run-dir>/tb."""
    progress: bool = True
    """Show a rich progress line."""
    truncation_warn: float = 0.05
    """Warn when the truncated fraction of a step passes this (paper: 10-15% destabilises)."""


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 100
    """Checkpoint every N optimizer steps (and at the end); 0: only at the end."""
    keep: int = 2
    """Most recent checkpoints kept."""


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
    """Metrics outputs."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint cadence."""
