"""The throughput model's uncertain constants, each with the range it may take, and the serial
work a step carries beside generating and training: publishing the weights (gather, copy to
host, write, the engines' reload), and validation and checkpoints amortised per step.

FLOP convention (one, for the whole model and for scripts/gpu-check's MFU): PaLM's (Chowdhery
et al. 2022, appendix B), which torchtitan's MFU also uses: 6 x N + 12 x layers x heads x
head_dim x T per trained token, N the parameters a token multiplies through, T its row's length,
the attention counted over the whole T x T square (not halved for the causal mask). TRAINER_MFU
is a figure in that convention; an MFU measured with the attention halved reads higher.

Error bars: every constant below has an optimistic, a nominal and a pessimistic value
(`FAST`, `NOMINAL`, `SLOW`). Each moves the step the same way across its range, so the step
with every constant at its optimistic end and the step with every one at its pessimistic end
bound the nominal step: the printed range is those two, not a statistical interval.

Pure values and functions; nothing is measured or started here.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKPOINT_BYTES_PER_PARAM = 12
"""A checkpoint's bytes per parameter: fp32 weights (4) and AdamW's two fp32 moments (8), as
trainer checkpoints hold them today (about 98 GB for an 8B model)."""


@dataclass(frozen=True)
class Constants:
    """The model's uncertain constants, one value each."""

    mbu: float
    """Memory-bandwidth utilisation of a decode step. Nominal 0.6: the Databricks/MosaicML post
    "LLM Inference Performance Engineering: Best Practices" (2023); 0.75: a vLLM 0.23 decode
    of Llama-3.1-8B at batch 1 on an A100 reads at ~77% of the bandwidth
    (https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on); 0.5: assumed for long
    contexts whose attention reads scattered KV blocks."""
    mfu: float
    """Trainer MFU (the convention above). Nominal 0.25: torchtitan's Llama 3.1 8B on 8 H100s
    reaches 33-39% with selective checkpointing (docs/performance.md); full checkpointing runs
    one more forward, 8 passes where 6 count: 0.33 x 6/8 = 0.25; 0.29: 0.39 x 6/8; 0.20:
    assumed for varlen packing without torch.compile."""
    gather: float
    """Share of NVLink's one-way bandwidth a publish's FSDP2 all-gather reaches: 0.87 is the
    783 of 900 GB/s nccl-tests reach on an HGX H100 (https://github.com/NVIDIA/nccl/issues/
    1264); 0.5 assumed for one tensor at a time."""
    host_copy: float
    """Share of the PCIe one-way bandwidth (Gpu.host_bandwidth) a copy of each bf16 tensor into
    freshly pinned host memory reaches (trainer/publish.py `prepare`: a pinned allocation per
    tensor). Assumed 0.2-0.8, nominal 0.4; a run's publish seconds measure it."""
    write: float
    """Bytes/s the generator writes the safetensors shards at (page cache). Assumed 1.5-6 GB/s,
    nominal 3 (one thread copying into the page cache)."""
    reload: float
    """Bytes/s one engine reads the shards and loads them onto its GPU (each engine in
    parallel). Assumed 2-8 GB/s, nominal 4 (safetensors read from the page cache, pageable
    host-to-device copies)."""
    reload_fixed_s: float
    """Seconds of a publish beside the bytes: the engines' pause, prefix-cache reset and
    resume. Assumed 0.5-3 s, nominal 1."""
    disk: float
    """Bytes/s a checkpoint is written at. Assumed 1-4 GB/s, nominal 2 (one NVMe drive's
    sequential write)."""

    def __post_init__(self) -> None:
        for name in ("mbu", "mfu", "gather", "host_copy"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"Constants.{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("write", "reload", "disk"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Constants.{name} must be > 0, got {getattr(self, name)}")


NOMINAL = Constants(mbu=0.6, mfu=0.25, gather=0.87, host_copy=0.4, write=3e9, reload=4e9,
                    reload_fixed_s=1.0, disk=2e9)
FAST = Constants(mbu=0.75, mfu=0.29, gather=0.87, host_copy=0.8, write=6e9, reload=8e9,
                 reload_fixed_s=0.5, disk=4e9)
SLOW = Constants(mbu=0.5, mfu=0.20, gather=0.5, host_copy=0.2, write=1.5e9, reload=2e9,
                 reload_fixed_s=3.0, disk=1e9)


@dataclass(frozen=True)
class Publish:
    """One publish's serial work, seconds by term."""

    gather_s: float
    """FSDP2 all-gather of the fp32 weights onto rank 0 over NVLink (sharded trainer only)."""
    copy_s: float
    """files: the bf16 weights to pinned host memory; nccl: their broadcast over NVLink."""
    write_s: float
    """files: the generator writing the shards (0 with nccl)."""
    reload_s: float
    """files: an engine reading and loading them; both: the engines' pause and resume."""

    @property
    def total_s(self) -> float:
        return self.gather_s + self.copy_s + self.write_s + self.reload_s


def publish_work(params: int, engine_bytes: int, *, sharded: bool, transfer: str,
                 link_bandwidth: float, host_bandwidth: float, k: Constants) -> Publish:
    """The serial work of one publish of `params` parameters (`engine_bytes` in the engine's
    dtype) at constants `k`."""
    gather = 4 * params / (link_bandwidth * k.gather) if sharded else 0.0
    if transfer == "nccl":
        return Publish(gather, engine_bytes / (link_bandwidth * k.gather), 0.0,
                       k.reload_fixed_s)
    return Publish(gather, engine_bytes / (host_bandwidth * k.host_copy),
                   engine_bytes / k.write, engine_bytes / k.reload + k.reload_fixed_s)


def checkpoint_seconds(params: int, k: Constants) -> float:
    """Seconds to write one checkpoint (CHECKPOINT_BYTES_PER_PARAM per parameter)."""
    return CHECKPOINT_BYTES_PER_PARAM * params / k.disk


def checkpoints_per_step(every: int, every_s: float, step_s: float) -> float:
    """Checkpoints a step writes on average: one per `every` steps, or one per `every_s`
    seconds of steps when that comes sooner (0: that cadence is off)."""
    by_steps = 1 / every if every > 0 else 0.0
    by_time = step_s / every_s if every_s > 0 else 0.0
    return max(by_steps, by_time)
