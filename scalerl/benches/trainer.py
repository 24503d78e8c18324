"""`scalerl bench trainer`: one trainer step's peak memory and tokens/s with the LM head chunked
over tokens, against the full (B, T, V) logits it replaced (the baseline), in the same run.

Each variant runs in its own process on a random-initialised Qwen2 of the given shape (default:
batch 4 x 2,048 tokens, vocabulary 32,768, hidden 256, 2 layers): the real `train_step` (AdamW,
FP32 head, CISPO) on a batch whose completions are all but the first 128 tokens of each row. A
first step allocates the optimizer state; the peak is then the highest memory above what the
process holds between steps (weights, gradients, AdamW moments, batch) over `--steps` timed
steps: on CPU the kernel's high-water mark (VmHWM, reset through /proc/self/clear_refs), on CUDA
torch's max_memory_allocated. `measure_step` is what scripts/gpu-check calls on larger models.
No assertions here; tests check the figures' shape and the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from scalerl.benches import positive_int

HELP = ("trainer step peak memory and tokens/s: chunked LM head vs full (B, T, V) logits; "
        "packed vs padded rows")
PROMPT_TOKENS = 128
ROWS = {"full": "full", "chunked": "full", "padded": "padded", "packed": "packed"}
"""Variant -> its rows (`measure_step`): `full` logits and the `chunked` head on rows of equal
length; `padded` and `packed` micro-batches (both chunked) of rows spread 10x in length."""


@dataclass(frozen=True)
class Shape:
    batch: int = 4
    seq: int = 2048
    vocab: int = 32768
    hidden: int = 256
    layers: int = 2
    intermediate: int | None = None
    """MLP width (None: 4 x hidden)."""
    heads: int | None = None
    """Attention heads (None: hidden / 64)."""
    kv_heads: int | None = None
    """Key/value heads (None: as many as heads)."""
    tied: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    d = Shape()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch", type=positive_int, default=d.batch)
    parser.add_argument("--seq", type=positive_int, default=d.seq, help="tokens per row")
    parser.add_argument("--vocab", type=positive_int, default=d.vocab)
    parser.add_argument("--hidden", type=positive_int, default=d.hidden)
    parser.add_argument("--layers", type=positive_int, default=d.layers)
    parser.add_argument("--chunk", type=positive_int, default=1024,
                        help="completion tokens per LM-head chunk (policy.logit_chunk_tokens)")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps per variant")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute decoder layers in the backward (both variants)")


def qwen2(shape: Shape):
    """A random-initialised Qwen2 config of `shape` (head dim 64)."""
    from transformers import Qwen2Config

    heads = shape.heads or max(1, shape.hidden // 64)
    return Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden,
                       intermediate_size=shape.intermediate or 4 * shape.hidden,
                       num_hidden_layers=shape.layers, num_attention_heads=heads,
                       num_key_value_heads=shape.kv_heads or heads, head_dim=shape.hidden // heads,
                       max_position_embeddings=max(shape.seq, 2048),
                       tie_word_embeddings=shape.tied, use_cache=False)


def full_logits_stats(model, input_ids, attention_mask, prompt_lens, completion_lens,
                      temperature: float = 1.0, fp32_head: bool = True):
    """The baseline: the LM head's (B, T, V) logits, log-softmax and entropy held at once (the
    trainer's head before it was chunked)."""
    import torch

    from scalerl.trainer.policy import completion_positions

    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    positions = completion_positions(prompt_lens, completion_lens)
    h = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
    weight = model.lm_head.weight
    with torch.autocast(device_type=h.device.type, enabled=False):
        logits = torch.nn.functional.linear(h.float() if fp32_head else h,
                                            weight.float() if fp32_head else weight)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    targets = input_ids.gather(1, (positions + 1).clamp(max=input_ids.shape[1] - 1))
    logprobs = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logprobs, (-(logp.exp() * logp).sum(-1)).detach()


def spread_batch(shape: Shape, seed: int = 0):
    """`shape.batch` rows whose lengths spread 10x, from `shape.seq` / 10 to `shape.seq`, each
    with a prompt of an eighth of its tokens; right-padded, as the trainer's batches are."""
    import torch

    from scalerl.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    b = shape.batch
    lengths = torch.linspace(shape.seq / 10, shape.seq, b).round().long()
    prompts = (lengths // 8).clamp(min=1)
    completions = lengths - prompts
    cols = torch.arange(shape.seq)[None, :]
    ids = torch.randint(3, shape.vocab, (b, shape.seq), generator=g)
    attention = (cols < lengths[:, None]).long()
    width = int(completions.max())
    mask = (torch.arange(width)[None, :] < completions[:, None]).float()
    return TrainBatch(input_ids=ids * attention, attention_mask=attention, prompt_lens=prompts,
                      completion_lens=completions, old_logprobs=-10.0 * mask, mask=mask,
                      advantages=torch.randn(b, 1, generator=g), weights=mask / mask.sum())


def random_batch(shape: Shape, seed: int = 0):
    """`shape.batch` rows of `shape.seq` random tokens, the first PROMPT_TOKENS the prompt."""
    import torch

    from scalerl.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    b, n = shape.batch, shape.seq - PROMPT_TOKENS
    ids = torch.randint(3, shape.vocab, (b, shape.seq), generator=g)
    weights = torch.full((b, n), 1.0 / (b * n))
    return TrainBatch(input_ids=ids, attention_mask=torch.ones_like(ids),
                      prompt_lens=torch.full((b,), PROMPT_TOKENS), completion_lens=torch.full(
                          (b,), n), old_logprobs=torch.full((b, n), -10.0),
                      mask=torch.ones(b, n), advantages=torch.randn(b, 1, generator=g),
                      weights=weights)


class _Memory:
    """Peak memory above the level at `start()`: CUDA allocator or the process's VmHWM."""

    def __init__(self, device):
        self.device = device

    @staticmethod
    def _status(key: str) -> float:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return float(line.split()[1]) / 1024  # kB -> MiB
        raise RuntimeError(f"/proc/self/status has no {key}")

    def start(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2**20
        else:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # resets the high-water mark to the current resident set
            self.base = self._status("VmRSS:")

    def peak(self) -> tuple[float, float]:
        """(peak above the start level, peak in all) in MiB."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            top = torch.cuda.max_memory_allocated() / 2**20
        else:
            top = self._status("VmHWM:")
        return top - self.base, top


def measure_step(shape: Shape, *, device: str, chunk: int | None, steps: int = 3,
                 gradient_checkpointing: bool = False, sharded: bool = False,
                 rows: str = "full") -> dict:
    """Train `steps` timed steps (after one warm-up) of a random Qwen2 of `shape` on `device`;
    `chunk` None: the full-logits baseline. On CUDA: fp32 master weights and AdamW state, bf16
    compute (autocast, or FSDP2's bf16 layers when `sharded`), FP32 head, as the trainer runs.
    `rows`: `full` (every row `shape.seq` tokens), or rows spread 10x in length (`spread_batch`)
    either `padded` (one micro-batch of right-padded rows) or `packed` (one micro-batch of the
    rows end to end, `offpolicy.micro_batch_tokens`); those two also return the initial
    model's completion logprobs (`logprobs`, row by row) to compare."""
    import torch
    from accelerate import Accelerator
    from transformers import Qwen2ForCausalLM

    from scalerl.trainer.packing import use_varlen_attention
    from scalerl.trainer.policy import PolicyModule, enable_gradient_checkpointing
    from scalerl.trainer.sharding import shard_policy
    from scalerl.trainer.step import train_step

    on_gpu = device == "cuda"
    # bf16 autocast reaches the model only through `prepare`, which a sharded policy skips
    accelerator = Accelerator(cpu=not on_gpu, mixed_precision="bf16" if on_gpu else "no")
    torch.manual_seed(0)
    with torch.device(accelerator.device):
        model = Qwen2ForCausalLM(qwen2(shape))
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if rows == "packed":
        use_varlen_attention(model)
    policy = PolicyModule(model, chunk_tokens=chunk or 1)
    if chunk is None:
        policy.forward = lambda *a: full_logits_stats(model, *a)
    if sharded:
        shard_policy(policy, accelerator.device, bf16=on_gpu, fp32_head=True)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    if not sharded:
        policy, optimizer = accelerator.prepare(policy, optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    batch, settings = bench_batch(shape, rows)
    extra = {} if rows == "full" else {"logprobs": first_logprobs(policy, batch, settings)}
    first = train_step(accelerator, policy, optimizer, scheduler, batch, settings)
    memory = _Memory(accelerator.device)
    memory.start()
    t = time.perf_counter()
    for _ in range(steps):
        train_step(accelerator, policy, optimizer, scheduler, batch, settings)
    if on_gpu:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t) / steps
    peak, total = memory.peak()
    params = sum(p.numel() for p in model.parameters())
    return {"peak_mib": peak, "total_peak_mib": total, "tokens_per_s": batch.num_tokens / seconds,
            "step_s": seconds, "first_loss": first["loss"], "params": params, **extra}


def bench_batch(shape: Shape, rows: str):
    """The batch of `measure_step`'s `rows` and the step's settings: one micro-batch of all of
    it (CISPO, FP32 head, clipping at 1), padded rows or, for `packed`, its tokens end to end."""
    from scalerl.trainer.losses import loss_kwargs
    from scalerl.trainer.step import StepSettings

    batch = random_batch(shape) if rows == "full" else spread_batch(shape)
    return batch, StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                               micro_batch_size=shape.batch, temperature=1.0, fp32_head=True,
                               max_grad_norm=1.0, micro_batch_tokens=batch.num_tokens
                               if rows == "packed" else None)


def first_logprobs(policy, batch, settings) -> list[list[float]]:
    """The completion logprobs of `batch` under `policy` as the step computes them (no grad)."""
    import torch

    from scalerl.trainer.step import _forward

    with torch.no_grad():
        logprobs, _ = _forward(policy, batch, settings)
    return [row[:n].tolist() for row, n in zip(logprobs, batch.completion_lens.tolist(),
                                               strict=True)]


def _child(variant: str, args: argparse.Namespace) -> dict:
    """One variant measured in a fresh process (its own high-water mark and allocator)."""
    spec = {"variant": variant, "device": args.device, "chunk": args.chunk, "steps": args.steps,
            "gradient_checkpointing": args.gradient_checkpointing, "shape": asdict(shape_of(args)),
            "rows": ROWS[variant]}
    proc = subprocess.run([sys.executable, "-m", "scalerl.benches.trainer", json.dumps(spec)],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"bench trainer: the {variant} run failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def shape_of(args: argparse.Namespace) -> Shape:
    return Shape(batch=args.batch, seq=args.seq, vocab=args.vocab, hidden=args.hidden,
                 layers=args.layers)


def run(args: argparse.Namespace) -> int:
    if args.seq <= PROMPT_TOKENS:
        print(f"bench trainer: --seq must exceed the {PROMPT_TOKENS} prompt tokens",
              file=sys.stderr)
        return 2
    out = {name: _child(name, args) for name in ROWS}
    out["chunked_vs_full_peak"] = out["chunked"]["peak_mib"] / out["full"]["peak_mib"]
    out["chunked_vs_full_tokens_per_s"] = (out["chunked"]["tokens_per_s"]
                                           / out["full"]["tokens_per_s"])
    out["packed_vs_padded_tokens_per_s"] = (out["packed"]["tokens_per_s"]
                                            / out["padded"]["tokens_per_s"])
    out["packed_vs_padded_logprob_max_abs_diff"] = max(
        abs(a - b) for pr, qr in zip(out["packed"].pop("logprobs"), out["padded"].pop("logprobs"),
                                     strict=True) for a, b in zip(pr, qr, strict=True))
    out["config"] = {**asdict(shape_of(args)), "device": args.device, "chunk": args.chunk,
                     "gradient_checkpointing": args.gradient_checkpointing}
    if args.json:
        print(json.dumps(out))
        return 0
    for name in ROWS:
        r = out[name]
        print(f"{name:>8}: peak {r['peak_mib']:8.1f} MiB above the state held between steps, "
              f"{r['tokens_per_s']:9.0f} tokens/s")
    print(f"chunked vs full: peak x{out['chunked_vs_full_peak']:.2f}, tokens/s "
          f"x{out['chunked_vs_full_tokens_per_s']:.2f}")
    print(f"packed vs padded (rows spread 10x in length): tokens/s "
          f"x{out['packed_vs_padded_tokens_per_s']:.2f}, logprobs max |diff| "
          f"{out['packed_vs_padded_logprob_max_abs_diff']:.1e}")
    return 0


def _main(spec: dict) -> None:
    chunk = None if spec["variant"] == "full" else spec["chunk"]
    result = measure_step(Shape(**spec["shape"]), device=spec["device"], chunk=chunk,
                          steps=spec["steps"], rows=spec["rows"],
                          gradient_checkpointing=spec["gradient_checkpointing"])
    print(json.dumps(result))


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
