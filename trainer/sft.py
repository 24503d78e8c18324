"""Supervised fine-tuning: causal-LM loss on completion tokens only, AdamW, deterministic seeding.

`sft(model, examples, config, pad_id=...)` trains any Hugging Face causal LM in place on
(prompt ids, completion ids) pairs and returns the loss curve. Prompt tokens and padding are masked
out of the loss, and so are completion tokens an example marks untrained (`completion_mask`: a
tool's output inside a multi-turn trace, which the model reads but never writes, as in RL). Used
by the tiny model's warm start (`scalerl.tiny`) and reusable for any warm start. It does not
tokenize, save checkpoints or evaluate; the caller does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SFTExample:
    """One training pair, already tokenized."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    """Completion tokens (EOS included by the caller when the model should learn to stop)."""
    completion_mask: tuple[bool, ...] | None = None
    """Per completion token: in the loss or not (None: all are). Environment tokens of a
    multi-turn trace (a tool's output) are False: context the model reads, never a target."""

    def __post_init__(self) -> None:
        mask = self.completion_mask
        if mask is not None and len(mask) != len(self.completion_ids):
            raise ValueError(f"SFTExample.completion_mask has {len(mask)} entries for "
                             f"{len(self.completion_ids)} completion tokens; they must match")

    def trained(self) -> tuple[bool, ...]:
        """The completion tokens' loss mask (all True when `completion_mask` is None)."""
        if self.completion_mask is None:
            return (True,) * len(self.completion_ids)
        return self.completion_mask


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 400
    """Optimizer steps."""
    batch_size: int = 64
    """Examples per step (drawn without replacement, reshuffled each epoch)."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup_steps: int = 20
    """Linear warm-up steps; cosine decay to `min_lr_frac * lr` afterwards."""
    min_lr_frac: float = 0.1
    """Final learning rate as a fraction of `lr`."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    """Max global gradient norm (0 disables clipping)."""
    seed: int = 0
    """Seeds the data order and torch's global RNG (dropout, if any)."""

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size <= 0 or self.lr <= 0:
            raise ValueError(
                f"SFTConfig needs steps >= 0, batch_size > 0, lr > 0; got steps={self.steps}, "
                f"batch_size={self.batch_size}, lr={self.lr}"
            )


@dataclass(frozen=True)
class SFTResult:
    losses: tuple[float, ...]
    """Mean completion-token loss of each step."""
    seconds: float
    tokens: int
    """Completion tokens trained on (summed over steps)."""
    extra: dict = field(default_factory=dict)


def collate(
    examples: Sequence[SFTExample], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, completion_mask), each (B, T); completion_mask is
    set on the completion tokens each example trains on."""
    seqs = [list(e.prompt_ids) + list(e.completion_ids) for e in examples]
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    completion_mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, (e, s) in enumerate(zip(examples, seqs, strict=True)):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention_mask[i, : len(s)] = 1
        completion_mask[i, len(e.prompt_ids) : len(s)] = torch.tensor(e.trained())
    return input_ids, attention_mask, completion_mask


def completion_loss(
    logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy over completion positions.

    logits (B, T, V) at position t predict input_ids[:, t + 1]; a target counts when
    completion_mask[:, t + 1] is set. Returns a scalar (0 when the mask is empty).
    """
    targets = input_ids[:, 1:]
    mask = completion_mask[:, 1:].float()  # (B, T-1)
    nll = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
        reduction="none",
    ).view_as(mask)
    return (nll * mask).sum() / mask.sum().clamp(min=1.0)


def lr_at(step: int, config: SFTConfig) -> float:
    """Linear warm-up then cosine decay to `min_lr_frac * lr`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.min_lr_frac
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_order(n: int, config: SFTConfig) -> list[list[int]]:
    """Indices of every step's batch: epochs of seeded permutations, cut into batches."""
    gen = torch.Generator().manual_seed(config.seed)
    flat: list[int] = []
    need = config.steps * config.batch_size
    while len(flat) < need:
        flat.extend(torch.randperm(n, generator=gen).tolist())
    bs = config.batch_size
    return [flat[i * bs : (i + 1) * bs] for i in range(config.steps)]


def sft(
    model: torch.nn.Module,
    examples: Sequence[SFTExample],
    config: SFTConfig,
    *,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
) -> SFTResult:
    """Train `model` in place on `examples`; `on_step(step, loss)` is called after each step."""
    if not examples:
        raise ValueError("sft: no training examples")
    torch.manual_seed(config.seed)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )
    losses: list[float] = []
    tokens = 0
    start = time.perf_counter()
    for step, idx in enumerate(batch_order(len(examples), config)):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        input_ids, attention_mask, completion_mask = collate([examples[i] for i in idx], pad_id)
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        loss = completion_loss(logits, input_ids, completion_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        tokens += int(completion_mask[:, 1:].sum())
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return SFTResult(losses=tuple(losses), seconds=time.perf_counter() - start, tokens=tokens)
