"""How much GPU memory a run needs, per trainer rank and for the engine, from the model's
config.json alone (the model is built on `meta`: no weights are read or allocated).

`model_shape(path)` counts the parameters of the real Hugging Face class and reads the widths
the activations depend on; `trainer_memory` and `engine_memory` are the memory model, a sum of
named parts in bytes, each a formula written out below. It is an estimate for planning (the
dry run, the shared-GPU check), written from how the trainer and vLLM 0.32 allocate, not a
measurement: none of these figures has been checked on a GPU yet (docs/gpu.md). No GPU is
touched here, and nothing trains or generates.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.planning.lora_sizing import engine_lora_memory, lora_trainer_memory
from scalerl.planning.units import BYTES, GIB

TRAINER_RESERVE = 2 * GIB
"""Per trainer process: the CUDA context, NCCL's buffers and the allocator's slack."""
FRAGMENTATION = 0.05
"""The caching allocator's reserved-but-unused memory, as a share of the bytes a step holds, with
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (set for trainer processes: scalerl/planning/
placement.py `trainer_allocator`; torch 2.13 docs, "CUDA memory management": segments grow in
place instead of splitting fixed blocks). Assumed, not measured: scripts/gpu-check prints
max_memory_reserved beside max_memory_allocated."""
ENGINE_RESERVE = 3 * GIB
"""The vLLM engine beyond weights and KV cache: CUDA context, CUDA graphs, the profile run's
activations and the sampler's logits."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a causal LM that its memory depends on."""

    params: int
    """Parameters, a tied embedding counted once."""
    layers: int
    """Decoder layers."""
    hidden: int
    """Residual width."""
    intermediate: int
    """MLP width."""
    heads: int
    """Query heads."""
    kv_heads: int
    """Key/value heads."""
    head_dim: int
    """Width of one attention head."""
    vocab: int
    """Vocabulary size (rows of the embedding and of the LM head)."""
    tied: bool
    """The LM head shares the embedding's weight."""
    qk_norm: bool = False
    """Each attention head's queries and keys are RMS-normalised (Qwen3's q_norm, k_norm)."""

    def __post_init__(self) -> None:
        for name in ("params", "layers", "hidden", "intermediate", "heads", "kv_heads",
                     "head_dim", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def root_params(self) -> int:
        """Embedding plus LM head (once when tied): the FSDP2 root's parameters."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def layer_params(self) -> int:
        return (self.params - self.root_params) // self.layers


def model_shape(path: str) -> ModelShape:
    """The shape of the model whose config.json is in directory `path` (built on `meta`)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    heads = text.num_attention_heads
    return ModelShape(
        params=sum(p.numel() for p in model.parameters()), layers=text.num_hidden_layers,
        hidden=text.hidden_size, intermediate=text.intermediate_size, heads=heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        vocab=text.vocab_size, tied=bool(getattr(config, "tie_word_embeddings", False)),
        qk_norm=any(name.endswith(".q_norm") for name, _ in model.named_modules()))


@dataclass(frozen=True)
class TrainerLayout:
    """How one trainer rank holds and computes the model (the config's plain values)."""

    ranks: int
    """Trainer processes the model is sharded over (FSDP2) or replicated on (DDP)."""
    sharded: bool
    """policy.sharding == fsdp2."""
    dtype: str
    """policy.dtype: auto (fp32 state, bf16 compute on GPU), float32, bfloat16 or float16."""
    fp32_head: bool
    """policy.fp32_head."""
    checkpointing: bool
    """policy.gradient_checkpointing."""
    micro_tokens: int
    """Tokens one forward/backward holds at once: offpolicy.micro_batch_tokens when set, else
    micro_batch_size x the longest sequence (engine.max_model_len)."""
    logit_chunk_tokens: int
    """policy.logit_chunk_tokens."""
    padded_rows: int = 0
    """Rows of a padded micro-batch (0 when packed): the attention mask is (rows, L, L)."""
    head_operands: str = "float32"
    """policy.head_operands: the FP32 head's operand dtype."""
    transfer: str = "files"
    """engine.weight_transfer: how rank 0 stages a publish (files: one tensor at a time to host
    memory; nccl: every tensor on its GPU, in the engine's dtype)."""
    engine_dtype: str = "bfloat16"
    """engine.dtype: the dtype a publish is staged in."""
    lora_rank: int = 0
    """policy.lora.rank: 0 trains the whole model; more, a frozen base and adapters on
    `lora_targets` (scalerl/planning/lora_sizing.py)."""
    lora_targets: tuple[str, ...] = ()
    """policy.lora.targets."""

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.micro_tokens < 1 or self.logit_chunk_tokens < 1:
            raise ValueError(f"TrainerLayout needs ranks, micro_tokens and logit_chunk_tokens "
                             f">= 1, got {self.ranks}, {self.micro_tokens}, "
                             f"{self.logit_chunk_tokens}")
        if self.dtype not in ("auto", *BYTES):
            raise ValueError(f"TrainerLayout.dtype {self.dtype!r}: auto, {', '.join(BYTES)}")
        for name in ("head_operands", "engine_dtype"):
            if getattr(self, name) not in BYTES:
                raise ValueError(f"TrainerLayout.{name} {getattr(self, name)!r}: one of "
                                 f"{', '.join(BYTES)}")
        if self.transfer not in ("files", "nccl"):
            raise ValueError(f"TrainerLayout.transfer {self.transfer!r}: files or nccl")


def trainer_memory(shape: ModelShape, t: TrainerLayout) -> dict[str, int]:
    """Peak bytes on one trainer GPU, by part (the state between steps, then a step's peak)."""
    state = 4 if t.dtype == "auto" else BYTES[t.dtype]  # weights, gradients and moments
    compute = 2 if t.dtype in ("auto", "bfloat16", "float16") else 4
    share = t.ranks if t.sharded else 1
    head_bytes = 4 if t.fp32_head else compute
    tokens = t.micro_tokens
    out = {"weights": state * shape.params // share,
           "gradients": state * shape.params // share,
           "optimizer": 2 * state * shape.params // share}
    if t.sharded:  # two decoder layers all-gathered in the compute dtype (one prefetched), and
        # the root (embeddings, head) whole for the step, with its full gradient at the end
        out["gathered"] = (2 * compute * shape.layer_params
                           + 2 * head_bytes * shape.root_params)
    # per token: a checkpointed layer keeps its input; the layer being recomputed holds its
    # norms, q/k/v/o, the MLP's gate/up/product and their gradients
    layer_working = (6 * shape.hidden + 2 * shape.heads * shape.head_dim
                     + 2 * shape.kv_heads * shape.head_dim + 4 * shape.intermediate) * compute
    kept = shape.layers if not t.checkpointing else 1
    out["activations"] = tokens * (shape.layers * shape.hidden * compute
                                   + kept * layer_working)
    out["logits"] = (3 * t.logit_chunk_tokens * shape.vocab * 4  # a chunk's logits, exp, grad
                     + tokens * shape.hidden * (4 + head_bytes))  # the head's inputs, kept
    if t.padded_rows:
        row = tokens // t.padded_rows
        out["attention_mask"] = t.padded_rows * row * row  # (B, 1, L, L) bool
    out |= missed_terms(shape, t, state, compute, kept)
    out["fragmentation"] = int(FRAGMENTATION * sum(out.values()))
    out["runtime"] = TRAINER_RESERVE
    if t.lora_rank:  # a frozen base and adapters: lora_sizing.py rewrites the state's parts
        return lora_trainer_memory(shape, t, out, fragmentation=FRAGMENTATION)
    return out


def missed_terms(shape: ModelShape, t: TrainerLayout, state: int, compute: int, kept: int
                 ) -> dict[str, int]:
    """The trainer memory a first count of weights, gradients, optimizer state and activations
    missed, one formula each:

    `rmsnorm_fp32`: transformers 5's RMSNorm (models/qwen3/modeling_qwen3.py Qwen3RMSNorm)
    casts a bf16 input to fp32 and autograd keeps that copy for `pow` and the product: 4 bytes
    x the norm's width per token, for the two norms of each kept layer (and Qwen3's q/k norms)
    and the final norm. `head_copies`: the FP32 head's weight cast to its operands (trainer/
    head.py, kept from forward to backward), vocab x hidden in that dtype unless it is the
    master's; its backward sums into the fp32 gradient with no other (vocab, hidden) copy.
    `reduce_scatter` (FSDP2): torch 2.13's foreach_reduce (distributed/fsdp/_fully_shard/
    _fsdp_collectives.py) copies a group's unsharded gradients into one `reduce_dtype` (fp32)
    buffer and reduces into a 1/ranks one; the layers' bf16 gradients wait for it: the larger
    of the root's and a layer's. `publish_staging` (rank 0, between steps, when the caching
    allocator still holds the step's blocks): the largest tensor gathered in fp32 and its cast
    to the engine's dtype; with nccl every tensor in the engine's dtype
    (trainer/publish.py `NCCLPublisher.prepare`). `head_fallback`: when CUDA's
    `addmm(out_dtype=float32)` refuses an fp32 `self` (trainer/head.py `_addmm_fp32`, not run on
    a GPU yet), the weight gradient is summed through one fp32 (vocab, hidden) temporary,
    counted whenever the FP32 head's operands are narrower than fp32."""
    out = {}
    if compute < 4:  # a bf16/fp16 body: the norms' fp32 copies are extra
        width = 2 * shape.hidden + (shape.heads + shape.kv_heads) * shape.head_dim * \
            shape.qk_norm
        out["rmsnorm_fp32"] = t.micro_tokens * 4 * (kept * width + shape.hidden)
    master = 4 if t.dtype == "auto" else BYTES[t.dtype]
    operands = BYTES[t.head_operands]  # a bf16 head is FSDP2's bf16 root: in `gathered`
    out["head_copies"] = (shape.vocab * shape.hidden * operands
                          if t.fp32_head and operands != master else 0)
    out["head_fallback"] = (shape.vocab * shape.hidden * 4
                            if t.fp32_head and operands < 4 else 0)
    if t.sharded:
        per_byte = 1 + 1 / t.ranks  # the fp32 input and the 1/ranks output
        out["reduce_scatter"] = int(max(shape.root_params * 4 * per_byte,
                                        shape.layer_params * (compute + 4 * per_byte)))
    largest = shape.vocab * shape.hidden
    engine = BYTES[t.engine_dtype]
    out["publish_staging"] = largest * 4 + (shape.params if t.transfer == "nccl"
                                            else largest) * engine
    return out


def usable(gpu_bytes: int, margin: float) -> int:
    """The bytes of a GPU of `gpu_bytes` (as CUDA reports it) a layout may plan to use:
    (1 - margin) x the GPU (scalerl/config.py `PlanConfig.memory_margin`)."""
    return int((1 - margin) * gpu_bytes)


def largest_micro_tokens(shape: ModelShape, t: TrainerLayout, room: int,
                         multiple: int = 1024) -> int:
    """The most tokens a packed micro-batch may hold with a trainer rank's peak within `room`
    bytes (the peak is affine in the tokens: measured at `multiple` and 2 x `multiple`),
    rounded down to `multiple`; 0 when not even `multiple` tokens fit."""
    import dataclasses

    packed = dataclasses.replace(t, padded_rows=0)
    one, two = (sum(trainer_memory(shape, dataclasses.replace(packed, micro_tokens=n))
                    .values()) for n in (multiple, 2 * multiple))
    per_chunk = two - one
    if room < one or per_chunk <= 0:
        return 0
    return int(1 + (room - one) // per_chunk) * multiple


def kv_bytes_per_token(shape: ModelShape, dtype: str, tp: int = 1) -> int:
    """KV-cache bytes of one token on one engine GPU (keys and values of every layer)."""
    return 2 * shape.layers * max(1, shape.kv_heads // tp) * shape.head_dim * BYTES[dtype]


def engine_memory(shape: ModelShape, *, dtype: str, kv_gib: float, tp: int = 1,
                  lora=None, max_tokens: int = 0) -> dict[str, int]:
    """Bytes on one engine GPU, by part: its weights' share, the KV cache, the rest; with `lora`
    (rollout/lora.py `LoraServing`) its LoRA slots and buffers at `max_tokens` tokens a step
    (lora_sizing.py)."""
    out = {"weights": shape.params * BYTES[dtype] // tp, "kv_cache": int(kv_gib * GIB),
           "runtime": ENGINE_RESERVE}
    if lora is not None:
        out |= engine_lora_memory(shape, lora, dtype=dtype, tp=tp, max_tokens=max_tokens)
    return out


def gib(parts: dict[str, int] | int) -> float:
    """GiB of a part or of the sum of parts."""
    return (sum(parts.values()) if isinstance(parts, dict) else parts) / GIB


def describe(parts: dict[str, int]) -> str:
    """`14.2 GiB (weights 5.0 + kv_cache 8.0 + runtime 1.2)`."""
    inner = " + ".join(f"{name} {gib(v):.1f}" for name, v in parts.items())
    return f"{gib(parts):.1f} GiB ({inner})"


def trainer_layout(cfg, ranks: int) -> TrainerLayout:
    """The TrainerLayout of run config `cfg` (a RunConfig) over `ranks` trainer processes: a
    micro-batch holds `offpolicy.micro_batch_tokens` tokens, or else `micro_batch_size` rows
    padded to the longest sequence (`engine.max_model_len`)."""
    p, o = cfg.policy, cfg.offpolicy
    packed = o.micro_batch_tokens is not None
    return TrainerLayout(
        ranks=ranks, sharded=p.sharding == "fsdp2", dtype=p.dtype, fp32_head=p.fp32_head,
        checkpointing=p.gradient_checkpointing, logit_chunk_tokens=p.logit_chunk_tokens,
        micro_tokens=o.micro_batch_tokens if packed else o.micro_batch_size
        * cfg.engine.max_model_len, padded_rows=0 if packed else o.micro_batch_size,
        head_operands=p.head_operands, transfer=cfg.engine.weight_transfer,
        engine_dtype=cfg.engine.dtype, lora_rank=p.lora.rank,
        lora_targets=tuple(p.lora.targets) if p.lora.rank else ())


def shared_engine_fraction(gpu: str, total: int, trainer: dict[str, int],
                           engine: dict[str, int]) -> float:
    """The engine's `gpu_memory_utilization` on GPU `gpu` (`total` bytes) shared with a trainer
    rank: its own need over the total, not a share of the whole GPU. vLLM 0.32 refuses to start
    when free memory < utilization x total, and the trainer holds `trainer` of it
    (PlacementError, one line with the numbers, when both cannot fit)."""
    from scalerl.planning.placement import PlacementError

    if sum(trainer.values()) + sum(engine.values()) > total:
        raise PlacementError(
            f"GPU {gpu} is shared by a trainer rank and the vLLM engine, which do not fit its "
            f"{gib(total):.1f} GiB: the trainer needs {describe(trainer)} and the engine "
            f"{describe(engine)}; lower engine.kv_cache_gib or offpolicy.micro_batch_tokens, "
            "or give the engine GPUs of its own (engine.devices, fewer ranks per node)")
    return min(1.0, sum(engine.values()) / total)


def check_engine_room(gpu: str, free: int, total: int, fraction: float) -> None:
    """Before the engine starts on a shared GPU: PlacementError (one line) unless the free
    memory covers what vLLM will ask for (`fraction` x `total`), as vLLM's own check does."""
    from scalerl.planning.placement import PlacementError

    need = fraction * total
    if free < need:
        raise PlacementError(
            f"GPU {gpu}: {gib(free):.1f} of {gib(total):.1f} GiB free with the trainer on it, but "
            f"the vLLM engine needs {gib(int(need)):.1f} GiB (engine.memory_fraction "
            f"{fraction:.3f}); lower engine.kv_cache_gib, or give the engine GPUs of its own")
