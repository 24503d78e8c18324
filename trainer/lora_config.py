"""`policy.lora`: the LoRA settings of a run (train PEFT adapters on a frozen base; publish only
the adapters). Checked here as values; whether the targets name modules of the model is checked
where the model is built. No model is touched here.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.rollout.lora import DEFAULT_TARGETS, VLLM_LORA_RANKS, LoraServing


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 0
    """LoRA rank r; 0 (the default) trains the full model. vLLM serves ranks up to 512 (the
    engine's `max_lora_rank` is the smallest of 1, 8, 16, 32, 64, 128, 256, 320, 512 >= r)."""
    alpha: float | None = None
    """PEFT `lora_alpha` (the update is scaled by alpha / r); None: 2 x rank."""
    dropout: float = 0.0
    """Dropout on the adapter's input in training (PEFT `lora_dropout`); the engine samples
    without it, so anything but 0 makes the trainer's log-probs differ from the engine's."""
    targets: tuple[str, ...] = DEFAULT_TARGETS
    """Module names that carry an adapter (PEFT `target_modules`): the attention and MLP
    projections by default. The LM head is not adapted by default."""

    SECTION = "policy.lora"

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale_alpha(self) -> float:
        return float(self.alpha) if self.alpha is not None else 2.0 * self.rank

    def serving(self, max_loras: int) -> LoraServing:
        """What the engine needs to serve this run's adapters, `max_loras` of them at once."""
        return LoraServing(rank=self.rank, alpha=self.scale_alpha, targets=self.targets,
                           max_loras=max_loras)

    def __post_init__(self) -> None:
        r = self.rank
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= VLLM_LORA_RANKS[-1]:
            raise ValueError(f"policy.lora.rank must be an integer in [0, {VLLM_LORA_RANKS[-1]}] "
                             f"(0: full fine-tuning; vLLM serves ranks up to "
                             f"{VLLM_LORA_RANKS[-1]}), got {r!r}")
        if self.alpha is not None and not self.alpha > 0:
            raise ValueError(f"policy.lora.alpha must be > 0 or null (2 x rank), got "
                             f"{self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"policy.lora.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise ValueError(f"policy.lora.targets must name modules, e.g. "
                             f"{list(DEFAULT_TARGETS)}; got {self.targets!r}")

