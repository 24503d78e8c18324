"""How fast a run would go, beside how much memory it needs (sizing.py): the engines' decode
tokens/s, the trainer's tokens/s, the step time with or without PipelineRL's overlap, rollouts
per hour, the trainer's and the engines' idle fractions and the recipe's wall time, from the
model's shape, a GPU's datasheet figures and a layout (trainer ranks, engines, their tensor
parallelism).

Pure functions over frozen dataclasses; every constant names its source (docs/gpu.md lists them
with a worked example). It is a model for planning: none of its figures has been measured on a
GPU, and docs/gpu.md says what a GPU run must check. No GPU is read and nothing starts here.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.planning.calibration import (
    FAST,
    NOMINAL,
    SLOW,
    Constants,
    checkpoint_seconds,
    checkpoints_per_step,
    publish_work,
)
from scalerl.planning.placement import Layout
from scalerl.planning.sizing import BYTES, ModelShape, kv_bytes_per_token

MBU = NOMINAL.mbu
"""Memory-bandwidth utilisation of a decode step, nominal (calibration.py `Constants.mbu`: its
sources and range)."""
TRAINER_MFU = NOMINAL.mfu
"""Trainer model-FLOPs utilisation, nominal, in PaLM's convention (calibration.py
`Constants.mfu`: its sources and range)."""
LENGTH_CV2 = 1 / 3
"""Squared coefficient of variation of the completion lengths assumed when E[L^2] is not given:
lengths spread evenly over [0, 2 x mean] (Var = mean^2 / 3). An assumption until a run's
length histogram gives E[L^2] (`--completion-rms`)."""
MAX_SEQS_CAP = 512
"""Most `max_num_seqs` chosen from the KV capacity: vLLM 0.32 captures CUDA graphs up to 512
sequences by default (`CompilationConfig.max_cudagraph_capture_size`); larger decode batches run
eagerly."""
IN_FLIGHT_WARN = 4.0
"""Warn when the rollouts in flight exceed this many times what the engines decode at once: the
rest wait in the engines' queues (oldest prompt first, by priority)."""
IDLE_WARN = 0.5
"""Warn when the trainer would idle more than this share of the time."""


@dataclass(frozen=True)
class Gpu:
    """A GPU's datasheet figures (NVIDIA's product pages; dense, without 2:4 sparsity)."""

    name: str
    """Registry name, e.g. H100-SXM."""
    memory_gb: float
    """Memory in GB as the datasheet says (80, 141)."""
    bandwidth: float
    """Memory bandwidth, bytes/s."""
    bf16_flops: float
    """Peak dense BF16 tensor-core FLOP/s (the datasheet's sparse figure halved)."""
    link_bandwidth: float
    """GPU-to-GPU bandwidth one way, bytes/s (NVLink, half the datasheet's bidirectional)."""
    host_bandwidth: float
    """GPU-to-host bandwidth one way, bytes/s (PCIe x16, half the bidirectional figure)."""
    source: str
    """Where the figures are from."""
    reported_gib: float = 0.0
    """Memory as CUDA reports it (`torch.cuda.get_device_properties().total_memory`, the
    figure nvidia-smi prints in MiB), GiB; 0: not known, `memory_gb` GiB is taken."""

    @property
    def cuda_gib(self) -> float:
        """The GiB a plan may take this GPU to have: as reported, else the datasheet's GB."""
        return self.reported_gib or self.memory_gb

    def __post_init__(self) -> None:
        for field in ("memory_gb", "bandwidth", "bf16_flops", "link_bandwidth",
                      "host_bandwidth"):
            if getattr(self, field) <= 0:
                raise ValueError(f"Gpu {self.name}: {field} must be > 0")


_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (datasheet)"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (datasheet)"
_A100 = "https://www.nvidia.com/en-us/data-center/a100/ (datasheet)"
H100_REPORTED = 81559 / 1024
"""An H100 80GB HBM3 reports 81,559 MiB (79.6 GiB): nvidia-smi in
https://github.com/NVIDIA/nccl/issues/1264, and 85,520,809,984 bytes as CUDA's total in
https://github.com/modal-labs/modal-client/pull/2797 (which also lists the A100s': 81,920 and
40,960 MiB)."""
H200_REPORTED = 143771 / 1024
"""An H200 reports 143,771 MiB (140.4 GiB) in nvidia-smi logs of 8 x H200 nodes in public
repositories (a search for "143771MiB"); no vendor page states it."""
GPUS = {g.name: g for g in [
    Gpu("A100-40GB", 40, 1.555e12, 312e12, 300e9, 32e9, _A100, 40960 / 1024),
    Gpu("A100-80GB", 80, 2.039e12, 312e12, 300e9, 32e9, _A100, 81920 / 1024),
    Gpu("H100-PCIe", 80, 2.0e12, 756e12, 300e9, 64e9, _H100),
    Gpu("H100-SXM", 80, 3.35e12, 989e12, 450e9, 64e9, _H100, H100_REPORTED),
    Gpu("H100-NVL", 94, 3.9e12, 835e12, 300e9, 64e9, _H100),
    Gpu("H200-NVL", 141, 4.8e12, 835e12, 450e9, 64e9, _H200, H200_REPORTED),
    Gpu("H200-SXM", 141, 4.8e12, 989e12, 450e9, 64e9, _H200, H200_REPORTED),
]}
"""The GPUs the model knows, by name."""


def gpu_named(name: str) -> Gpu:
    """The registered GPU `name` (ValueError, one line, naming the registered ones)."""
    if name not in GPUS:
        raise ValueError(f"GPU {name!r} is not registered; known: {', '.join(GPUS)}")
    return GPUS[name]


def gpu_for(gib: float, device_name: str | None = None) -> Gpu:
    """The GPU a device name reports (torch's `get_device_name`, e.g. "NVIDIA H100 80GB
    HBM3"), else the registered one whose memory is nearest `gib` (ties: the fastest memory;
    80 -> H100-SXM, 141 -> H200-SXM). An unknown device name falls back on the memory."""
    text = (device_name or "").upper()
    family = [g for g in GPUS.values() if g.name.split("-")[0] in text]
    marked = [g for g in family if g.name.split("-")[1].upper() in text.replace(" ", "-")]
    plain = [g for g in family if g.name.split("-")[1] not in ("NVL", "PCIe")]
    pool = marked or plain or family or list(GPUS.values())
    return min(pool, key=lambda g: (abs(g.memory_gb - gib), -g.bandwidth, -g.bf16_flops))


@dataclass(frozen=True)
class Workload:
    """What one training step asks of the engines and the trainer."""

    rollouts_per_step: int
    """prompts_per_step x rollouts_per_prompt."""
    prompt_tokens: int
    """Mean prompt length (chat template included)."""
    completion_tokens: int
    """Mean completion length."""
    steps: int
    """Training steps of the run."""
    overlap: bool
    """Generation and training overlap (PipelineRL); False: they alternate (PPO-offpolicy)."""
    steps_per_publish: int = 1
    """Steps between two publishes of the weights (PPO-offpolicy-k: k; PipelineRL: 1)."""
    completion_sq_mean: float | None = None
    """E[L^2] of the completion lengths L (None: (1 + LENGTH_CV2) x mean^2)."""
    val_rollouts: int = 0
    """Rollouts of one validation on the training engines (0: none, or on val.servers)."""
    val_every: int = 0
    """Steps between validations (0: none)."""
    checkpoint_every: int = 0
    """Steps between checkpoints (0: by time only, or none)."""
    checkpoint_every_s: float = 0.0
    """Seconds between checkpoints (0: by steps only)."""
    sharded: bool = True
    """The trainer is FSDP2-sharded: a publish all-gathers the weights first."""
    publish_params: int = 0
    """Parameters a publish sends (0: the whole model; a LoRA run: its adapter's)."""
    frozen_base: bool = False
    """LoRA: the base is frozen, so its weight gradients (2 of a trained token's 6 x params
    FLOPs) are not computed."""

    def __post_init__(self) -> None:
        for field in ("rollouts_per_step", "completion_tokens", "steps", "steps_per_publish"):
            if getattr(self, field) < 1:
                raise ValueError(f"Workload.{field} must be >= 1, got {getattr(self, field)}")
        if self.prompt_tokens < 0:
            raise ValueError(f"Workload.prompt_tokens must be >= 0, got {self.prompt_tokens}")
        if self.length_sq < self.completion_tokens ** 2:
            raise ValueError(f"Workload.completion_sq_mean {self.completion_sq_mean} is below "
                             f"the mean squared ({self.completion_tokens ** 2}): E[L^2] >= "
                             "E[L]^2")
        for field in ("val_rollouts", "val_every", "checkpoint_every", "checkpoint_every_s"):
            if getattr(self, field) < 0:
                raise ValueError(f"Workload.{field} must be >= 0, got {getattr(self, field)}")

    @property
    def length_sq(self) -> float:
        """E[L^2] of the completions, given or assumed (LENGTH_CV2)."""
        if self.completion_sq_mean is not None:
            return self.completion_sq_mean
        return (1 + LENGTH_CV2) * self.completion_tokens ** 2

    @property
    def sequence(self) -> int:
        """Mean tokens of a rollout (prompt + completion): a trained row."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def context(self) -> int:
        """Mean context of the sequences decoding at any moment: p + E[L^2] / (2 E[L]). A
        sequence of length L holds its slot for L decode steps at a mean context p + L/2, so a
        running sequence is length-biased (picked with weight L): E[L (p + L/2)] / E[L]."""
        return int(self.prompt_tokens + self.length_sq / (2 * self.completion_tokens))

    @property
    def attention_sequence(self) -> float:
        """The row length a trained token's attention FLOPs see on average (token-weighted):
        E[S^2] / E[S], S = p + L the row's length."""
        p, mean = self.prompt_tokens, self.completion_tokens
        return (p * p + 2 * p * mean + self.length_sq) / (p + mean)


@dataclass(frozen=True)
class Decode:
    """One engine's decode steady state."""

    kv_tokens: int
    """Tokens its KV cache holds (per GPU; a TP engine's GPUs hold the same tokens)."""
    sequences: int
    """Sequences decoding at once: max_num_seqs, or what the KV holds at the mean context."""
    step_s: float
    """Seconds of one decode step (one token for each sequence)."""
    tokens_per_s: float
    """Tokens the engine generates per second."""
    bound: str
    """`memory` (reading weights and KV) or `compute` (the step's FLOPs at peak)."""


@dataclass(frozen=True)
class Throughput:
    """A layout's predicted speed."""

    layout: Layout
    """Trainer ranks, engines and their tensor parallelism."""
    decode: Decode
    """One engine's steady state."""
    decode_tokens_per_s: float
    """Tokens per second of all engines together."""
    trainer_tokens_per_s: float
    """Tokens per second the trainer ranks train on together."""
    generate_s: float
    """Seconds the engines take to generate one step's rollouts."""
    train_s: float
    """Seconds the trainer takes for one step."""
    publish_s: float
    """Seconds per step of the publish's serial work (calibration.py `publish_work`: gather,
    copy, write, the engines' reload), over the steps between publishes."""
    validation_s: float
    """Seconds per step of validation on the training engines, amortised over val.every."""
    checkpoint_s: float
    """Seconds per step of writing checkpoints, amortised over their cadence."""
    step_s: float
    """Seconds per step: PipelineRL max(generate, train), PPO generate + train; plus publish,
    validation and checkpoint (nominal constants)."""
    step_range: tuple[float, float]
    """The step with every uncertain constant at its optimistic end, and at its pessimistic
    end (calibration.py `FAST`, `SLOW`): the error bars of `step_s`."""
    rollouts_per_hour: float
    """Rollouts trained on per hour."""
    trainer_idle: float
    """Share of a step the trainer waits: 1 - train / step."""
    generator_idle: float
    """Share of a step the engines wait: 1 - generate / step."""
    wall_s: float
    """Seconds of the whole run's steps (start-up not counted)."""
    concurrency: int
    """Sequences all engines decode at once."""


def compute_params(shape: ModelShape) -> int:
    """Parameters each token multiplies through: all but an untied input embedding (a lookup;
    torchtitan's FLOP count leaves it out the same way)."""
    return shape.params - (0 if shape.tied else shape.vocab * shape.hidden)


def max_num_seqs_for(kv_tokens: int, context: int) -> int:
    """The sequences the KV cache holds at the mean context (at least 1, at most
    MAX_SEQS_CAP), so vLLM's scheduler is not preempting all the time."""
    return max(1, min(MAX_SEQS_CAP, kv_tokens // max(1, context)))


def decode(shape: ModelShape, gpu: Gpu, *, tp: int, dtype: str, kv_bytes: int, context: int,
           max_num_seqs: int, mbu: float = MBU) -> Decode:
    """A decode step is memory-bound (vLLM reads every weight once per step, and each
    sequence's KV): per GPU, weights / tp + sequences x context x KV bytes per token, at
    `MBU` of the bandwidth; never faster than its FLOPs (2 x compute params + 4 x layers x
    attention width x context per token) at the GPU's peak."""
    per_token = kv_bytes_per_token(shape, dtype, tp)
    kv_tokens = kv_bytes // per_token
    seqs = min(max_num_seqs, kv_tokens // max(1, context))
    if seqs < 1:
        raise ValueError(f"the KV cache ({kv_tokens} tokens per GPU) does not hold one sequence "
                         f"at the mean context ({context} tokens)")
    read = compute_params(shape) * BYTES[dtype] / tp + seqs * context * per_token
    memory_s = read / (gpu.bandwidth * mbu)
    flops = seqs * (2 * compute_params(shape)
                    + 4 * shape.layers * shape.heads * shape.head_dim * context) / tp
    compute_s = flops / gpu.bf16_flops
    step = max(memory_s, compute_s)
    return Decode(kv_tokens=kv_tokens, sequences=seqs, step_s=step, tokens_per_s=seqs / step,
                  bound="memory" if memory_s >= compute_s else "compute")


def trainer_flops_per_token(shape: ModelShape, sequence: int, frozen: bool = False) -> float:
    """Model FLOPs per trained token (PaLM appendix B; torchtitan counts the same): 6 x compute
    params + 12 x layers x attention width x the row's length; `frozen` (LoRA): 4 x compute
    params, the base's weight gradients not computed (the adapter's own FLOPs are under 2%)."""
    return ((4 if frozen else 6) * compute_params(shape)
            + 12 * shape.layers * shape.heads * shape.head_dim * sequence)


def trainer_tokens_per_s(shape: ModelShape, gpu: Gpu, ranks: int, sequence: int,
                         mfu: float = TRAINER_MFU, frozen: bool = False) -> float:
    """Tokens per second `ranks` trainer GPUs train on at `mfu` of their peak."""
    return ranks * gpu.bf16_flops * mfu / trainer_flops_per_token(shape, sequence, frozen)


def publish_seconds(shape: ModelShape, gpu: Gpu, *, dtype: str, transfer: str,
                    sharded: bool = True, k: Constants = NOMINAL, params: int = 0) -> float:
    """Seconds of one publish's serial work (calibration.py `publish_work`) of `params`
    parameters (0: the whole model)."""
    params = params or shape.params
    return publish_work(params, params * BYTES[dtype], sharded=sharded,
                        transfer=transfer, link_bandwidth=gpu.link_bandwidth,
                        host_bandwidth=gpu.host_bandwidth, k=k).total_s


def step_parts(shape: ModelShape, gpu: Gpu, layout: Layout, work: Workload, *, dtype: str,
               kv_bytes: int, max_num_seqs: int, transfer: str, k: Constants) -> dict:
    """The step's parts at constants `k`: one engine's decode, the engines' and the trainer's
    tokens/s, generate, train, publish, validation and checkpoint seconds, and the step."""
    one = decode(shape, gpu, tp=layout.tp, dtype=dtype, kv_bytes=kv_bytes,
                 context=work.context, max_num_seqs=max_num_seqs, mbu=k.mbu)
    engines_tps = layout.engines * one.tokens_per_s
    trainer_tps = trainer_tokens_per_s(shape, gpu, layout.ranks, work.attention_sequence,
                                       mfu=k.mfu, frozen=work.frozen_base)
    generate = work.rollouts_per_step * work.completion_tokens / engines_tps
    train = work.rollouts_per_step * work.sequence / trainer_tps
    publish = publish_seconds(shape, gpu, dtype=dtype, transfer=transfer, sharded=work.sharded,
                              k=k, params=work.publish_params) / work.steps_per_publish
    validation = (work.val_rollouts * work.completion_tokens / engines_tps / work.val_every
                  if work.val_every and work.val_rollouts else 0.0)
    step = (max(generate, train) if work.overlap else generate + train) + publish + validation
    checkpoint = checkpoint_seconds(shape.params, k) * checkpoints_per_step(
        work.checkpoint_every, work.checkpoint_every_s, step)
    return dict(decode=one, decode_tokens_per_s=engines_tps, trainer_tokens_per_s=trainer_tps,
                generate_s=generate, train_s=train, publish_s=publish,
                validation_s=validation, checkpoint_s=checkpoint, step_s=step + checkpoint)


def throughput(shape: ModelShape, gpu: Gpu, layout: Layout, work: Workload, *, dtype: str,
               kv_bytes: int, max_num_seqs: int, transfer: str = "files") -> Throughput:
    """The predicted speed of `layout` on `gpu` for `work`, at the nominal constants, with the
    step at the optimistic and at the pessimistic ends of their ranges (calibration.py)."""
    args = dict(dtype=dtype, kv_bytes=kv_bytes, max_num_seqs=max_num_seqs, transfer=transfer)
    parts = step_parts(shape, gpu, layout, work, k=NOMINAL, **args)
    fast, slow = (step_parts(shape, gpu, layout, work, k=k, **args)["step_s"]
                  for k in (FAST, SLOW))
    step = parts["step_s"]
    return Throughput(
        layout=layout, **parts, step_range=(fast, slow),
        rollouts_per_hour=work.rollouts_per_step * 3600 / step,
        trainer_idle=1 - parts["train_s"] / step,
        generator_idle=1 - parts["generate_s"] / step, wall_s=work.steps * step,
        concurrency=layout.engines * parts["decode"].sequences)


def warnings(speed: Throughput, in_flight: int, *, overlap: bool = True) -> list[str]:
    """One line per thing the plan would waste: rollouts in flight far beyond what the engines
    decode at once, or a trainer idle most of the time (`overlap`: PipelineRL; without it the
    idle time is PPO-offpolicy's turns, which more engines only shorten)."""
    out = []
    if in_flight > IN_FLIGHT_WARN * speed.concurrency:
        out.append(f"warning: {in_flight} rollouts in flight but the engines decode "
                   f"{speed.concurrency} at once ({in_flight / speed.concurrency:.1f}x, over "
                   f"{IN_FLIGHT_WARN:g}x): the rest wait in the engines' queues, oldest prompt "
                   "first; offpolicy.max_in_flight caps them (on CPU a cap near the engines' "
                   "concurrency slowed PipelineRL: docs/gpu.md)")
    if speed.trainer_idle > IDLE_WARN:
        fix = ("give generation more GPUs" if overlap else "PPO-offpolicy generates and trains "
               "in turn; offpolicy.mode=pipelinerl overlaps them")
        out.append(f"warning: the trainer would idle {speed.trainer_idle:.0%} of each step "
                   f"({speed.layout.ranks} trainer ranks, {speed.layout.engines} "
                   f"engine{'s' if speed.layout.engines != 1 else ''}): {fix}")
    return out
