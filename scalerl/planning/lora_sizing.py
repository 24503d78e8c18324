"""LoRA in the dry run (`policy.lora.rank` > 0): the adapter's parameters from the
model's shape, a trainer rank's memory with a frozen bf16 base and an fp32 adapter, the engine's
LoRA slots and buffers as vLLM 0.32 allocates them, and the bytes of a publish (the adapter
only). Pure functions over sizing.py's `ModelShape` and `TrainerLayout` (sizing.py calls them:
this module imports only units.py); the rest of the memory
model (activations, logits, norms) is sizing.py's, unchanged. Not here: the trainer's PEFT
wrapping and the engine's adapter loading (trainer/, rollout/); a LoRA checkpoint's size (the
throughput model still counts a full one: an upper bound).
"""

from __future__ import annotations

import dataclasses

from scalerl.planning.units import BYTES

FROZEN_BYTES = 2
"""Bytes per frozen base parameter on a LoRA trainer GPU: bf16 (trainer/lora.py keeps the frozen
base in `policy.dtype`, bf16 on GPU, and the adapter and its optimizer state in fp32)."""
ADAPTER_STATE_BYTES = {"adapter": 4, "gradients": 4, "optimizer": 8}
"""Bytes per adapter parameter: its fp32 weight, fp32 gradient and AdamW's two fp32 moments."""
VLLM_LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj")
"""The projections vLLM 0.32 wraps with LoRA layers in a Llama/Qwen decoder, whichever an adapter
targets (vllm/lora/model_manager.py `_create_lora_modules` wraps every supported module when the
engine starts; q/k/v as the 3 slices of `qkv_proj`, gate/up as the 2 of `gate_up_proj`)."""


def projections(shape) -> dict[str, tuple[str, int, int]]:
    """name -> (column | row parallel, in features, out features) of each decoder projection,
    from the shape (grouped-query heads: k and v have `kv_heads` heads)."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    h, m = shape.hidden, shape.intermediate
    return {"q_proj": ("col", h, q), "k_proj": ("col", h, kv), "v_proj": ("col", h, kv),
            "o_proj": ("row", q, h), "gate_proj": ("col", h, m), "up_proj": ("col", h, m),
            "down_proj": ("row", m, h), "lm_head": ("col", h, shape.vocab)}


def adapter_params(shape, rank: int, targets: tuple[str, ...]) -> int:
    """Parameters of a rank-`rank` adapter on `targets`: r x (in + out) for each targeted Linear
    of each layer (A is r x in, B is out x r); `lm_head` once. ValueError for another name."""
    known = projections(shape)
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ValueError(f"policy.lora.targets {unknown}: the dry run sizes {sorted(known)}")
    total = 0
    for name in dict.fromkeys(targets):
        _, n_in, n_out = known[name]
        total += rank * (n_in + n_out) * (1 if name == "lm_head" else shape.layers)
    return total


def lora_trainer_memory(shape, t, full: dict[str, int], *, fragmentation: float
                        ) -> dict[str, int]:
    """A LoRA trainer rank's parts, from `full` (sizing.trainer_memory's full fine-tuning parts
    of layout `t`, whose `lora_rank` > 0): the frozen base in bf16 and the fp32 adapter, its
    gradient and AdamW state (each / ranks with FSDP2); the layers gathered with their adapter
    and the root without a gradient; the FP32 head copies only fp32 operands and has no weight
    gradient (nor its fallback temporary); reduce-scatter and publish staging of the adapter
    alone; each targeted module's x @ A per token of the layer being recomputed. Activations,
    logits and the norms' copies are the full run's: the backward still runs through the base."""
    share = t.ranks if t.sharded else 1
    adapter = adapter_params(shape, t.lora_rank, t.lora_targets)
    per_layer = adapter_params(shape, t.lora_rank, tuple(
        x for x in t.lora_targets if x != "lm_head")) // shape.layers
    out = {k: v for k, v in full.items() if k not in ("fragmentation", "runtime")}
    out["weights"] = FROZEN_BYTES * shape.params // share
    out |= {part: size * adapter // share for part, size in ADAPTER_STATE_BYTES.items()}
    if t.sharded:
        out["gathered"] = (2 * FROZEN_BYTES * (shape.layer_params + per_layer)
                           + FROZEN_BYTES * shape.root_params)
        out["reduce_scatter"] = int(per_layer * (FROZEN_BYTES + 4 * (1 + 1 / t.ranks)))
    operands = BYTES[t.head_operands]
    out["head_copies"] = (shape.vocab * shape.hidden * operands
                          if t.fp32_head and operands != FROZEN_BYTES else 0)
    out["head_fallback"] = 0
    out["publish_staging"] = adapter * (4 + BYTES[t.engine_dtype])
    kept = 1 if t.checkpointing else shape.layers
    out["adapter_xa"] = (t.micro_tokens * kept * t.lora_rank * FROZEN_BYTES
                                  * len(set(t.lora_targets) - {"lm_head"}))
    out["fragmentation"] = int(fragmentation * sum(out.values()))
    out["runtime"] = full["runtime"]
    return out


def engine_lora_memory(shape, lora, *, dtype: str, tp: int = 1,
                       max_tokens: int) -> dict[str, int]:
    """Bytes on one engine GPU for serving `lora` (rollout/lora.py `LoraServing`).

    `lora_slots`: vLLM 0.32's `create_lora_weights` (vllm/lora/layers/base_linear.py and
    column_parallel_linear.py) allocates, for every wrapped projection of every layer,
    `lora_a_stacked` (max_loras, 1, max_lora_rank, in) and `lora_b_stacked` (max_loras, 1, out,
    max_lora_rank) in `lora_dtype` (vllm/config/lora.py: "auto" is the model's dtype); column
    parallel layers split `out` over TP, row parallel ones `in`. `lora_buffers`: the Punica
    wrapper's four token-index tensors of `max_num_batched_tokens` int64s
    (vllm/lora/punica_wrapper/punica_base.py) and the shrink's fp32 (slices, tokens, rank)
    buffer of `add_lora_linear` (punica_gpu.py), at `max_tokens` tokens a step (3 slices: qkv)."""
    r = lora.serving_rank
    per_layer = 0
    for name in VLLM_LORA_MODULES:
        kind, n_in, n_out = projections(shape)[name]
        per_layer += r * (n_in + n_out // tp) if kind == "col" else r * (n_in // tp + n_out)
    slots = lora.max_loras * shape.layers * per_layer * BYTES[dtype]
    return {"lora_slots": slots, "lora_buffers": 4 * 8 * max_tokens + 3 * max_tokens * r * 4}


def lora_serving(cfg):
    """The engine's LoRA serving of run config `cfg` (None without `policy.lora`): the run's
    adapters, `offpolicy.max_lag` + 1 of them loaded (one per weight version in flight)."""
    lora = cfg.policy.lora
    return lora.serving(max_loras=cfg.offpolicy.max_lag + 1) if lora.enabled else None


def lora_plan(cfg, shape, work):
    """(`cfg` with `engine.lora` set as a LoRA run's glue sets it, `work` with the publish and
    the trainer's FLOPs of the adapter): both unchanged without `policy.lora`."""
    serving = lora_serving(cfg)
    if serving is None:
        return cfg, work
    cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, lora=serving))
    params = adapter_params(shape, serving.rank, serving.targets)
    return cfg, dataclasses.replace(work, publish_params=params, frozen_base=True)


def publish_bytes(shape, e) -> int:
    """Bytes of one publish in the engine's dtype: the adapter with `engine.lora`, else the
    whole model."""
    params = (shape.params if e.lora is None
              else adapter_params(shape, e.lora.rank, e.lora.targets))
    return params * BYTES[e.dtype]


def publish_line(sent: int, shape, t) -> str:
    """The dry run's line for the bytes a publish sends (`t`: the trainer layout): a LoRA run's
    adapter beside the full weights in the engine's dtype."""
    if not t.lora_rank:
        return f"each publish sends {sent / 2**30:.1f} GiB of weights"
    full = shape.params * BYTES[t.engine_dtype]
    params = adapter_params(shape, t.lora_rank, t.lora_targets)
    return (f"each publish sends the rank-{t.lora_rank} adapter: {sent / 2**20:,.1f} MiB "
            f"({params:,} parameters on {', '.join(t.lora_targets)}), against "
            f"{full / 2**30:.1f} GiB of full weights ({full / sent:,.0f}x)")
