"""The rollout contract: `Budget` in, `Rollout` out. Shapes only; no engine, no scoring.

A `Rollout` is one completion of one sample with everything the trainer needs: token ids, the
sampling logprob of every sampled token (None for forced interruption tokens, which are excluded
from the loss), the policy version of every token, the finish reason, whether thinking was
interrupted, and the verifier's Score (a status, no reward: the trainer maps rewards).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from scalerl.envs.base import Score
from scalerl.envs.environment import Turn

FinishReason = Literal["stop", "interrupted", "truncated", "prompt_too_long"]
FINISH_REASONS: tuple[str, ...] = ("stop", "interrupted", "truncated", "prompt_too_long")
"""`prompt_too_long`: the prompt plus its longest completion did not fit `max_model_len`; the
rollout was never generated (no tokens; its score is an `error` saying so)."""
INTERRUPTION_PHRASE = (
    "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
)
"""ScaleRL's forced-interruption phrase (paper v1 §4)."""


@dataclass(frozen=True)
class Budget:
    """Length budgets of one rollout, in tokens."""

    thinking: int | tuple[int, int] | None = None
    """Thinking budget: a fixed number, an inclusive (low, high) range sampled per rollout, or
    None for models with no thinking format (the answer budget alone applies)."""
    answer: int = 2048
    """Tokens allowed after `</think>` (natural or forced)."""
    total: int | None = None
    """Hard cap on generated tokens (forced ones included); None: see `hard_cap`."""
    phrase: str = INTERRUPTION_PHRASE
    """Text injected when thinking reaches its budget without `</think>`."""

    def __post_init__(self) -> None:
        if isinstance(self.thinking, tuple):
            low, high = self.thinking
            if not 0 < low <= high:
                raise ValueError(f"Budget.thinking range must be 0 < low <= high, got {low}:{high}")
        elif self.thinking is not None and self.thinking <= 0:
            raise ValueError(f"Budget.thinking must be > 0, got {self.thinking}")
        if self.answer <= 0:
            raise ValueError(f"Budget.answer must be > 0, got {self.answer}")
        if self.total is not None and self.total <= 0:
            raise ValueError(f"Budget.total must be > 0 or null, got {self.total}")

    @property
    def max_thinking(self) -> int:
        if self.thinking is None:
            return 0
        return self.thinking[1] if isinstance(self.thinking, tuple) else self.thinking

    def hard_cap(self, phrase_len: int, thinking: int | None = None) -> int:
        """The most completion tokens a rollout may hold, forced ones included: `total` when set,
        else thinking + phrase + answer, so the forced phrase never eats into the answer budget.
        `thinking` is one rollout's sampled budget (default: the largest this budget allows);
        with no thinking format the answer budget alone applies."""
        if self.total is not None:
            return self.total
        if self.thinking is None:
            return self.answer
        return (self.max_thinking if thinking is None else thinking) + phrase_len + self.answer


@dataclass(frozen=True)
class Rollout:
    """One completion of one sample, as generated and scored."""

    sample_id: str
    task: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    """Completion tokens, forced interruption tokens included."""
    logprobs: tuple[float | None, ...]
    """Sampling logprob of each completion token (after temperature, no top-p/top-k
    renormalisation: training samples with top-p 1, top-k off; an evaluation protocol's top-p
    < 1 leaves these vLLM's processed logprobs); None for forced tokens."""
    versions: tuple[int, ...]
    """Policy version that produced each completion token (forced tokens: the version at
    injection)."""
    finish_reason: FinishReason
    """How generation ended: `stop` (EOS), `interrupted` (EOS after a forced interruption),
    `truncated` (a token budget ran out), `prompt_too_long` (never generated)."""
    thinking_tokens: int
    answer_tokens: int
    completion: str
    score: Score
    group: int = 0
    """Index of this rollout among the n rollouts of its sample."""
    interrupted: bool = False
    """Thinking reached its budget and the interruption phrase was forced, whatever happened
    after (`finish_reason` says whether the answer then ended or ran out of budget)."""
    reward: float | None = None
    """What the trainer trains this rollout with, mapped from the verdict's status by the run's
    reward settings (trainer/rewards.py); None until the trainer assigns it."""
    timings: dict[str, float] = field(default_factory=dict)
    """gen_s (generation wall time), score_s (verifier latency), queue_s, ..."""
    meta: dict[str, Any] = field(default_factory=dict)
    turns: tuple[Turn, ...] = ()
    """A multi-turn rollout's turns in order (envs/environment.py `Turn`: role, text, token
    range in `token_ids`, trained or not); empty for a single-turn rollout."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Each tool call of a multi-turn rollout: {"turn", "name", "code", "status", "output",
    "latency_s", "truncated"} (`turn`: the index in `turns` of the assistant turn that made it)."""

    @property
    def min_version(self) -> int:
        return min(self.versions) if self.versions else -1

    @property
    def max_version(self) -> int:
        return max(self.versions) if self.versions else -1

    def to_row(self) -> dict[str, Any]:
        """The JSONL row written by `scalerl generate` and read by `scalerl eval --rollouts`."""
        return {
            "sample_id": self.sample_id, "task": self.task, "group": self.group,
            "completion": self.completion, "prompt_token_ids": list(self.prompt_token_ids),
            "token_ids": list(self.token_ids), "logprobs": list(self.logprobs),
            "policy_version": [self.min_version, self.max_version],
            "versions": list(self.versions), "finish_reason": self.finish_reason,
            "interrupted": self.interrupted,
            "thinking_tokens": self.thinking_tokens, "answer_tokens": self.answer_tokens,
            "status": self.score.status, "detail": self.score.detail,
            "score_latency_s": self.score.latency_s,
            "timings": self.timings,
        } | ({"credit": self.score.reward} if self.score.reward is not None else {}) | (
            {"turns": [t.to_dict() for t in self.turns], "tool_calls": list(self.tool_calls),
             "ended": self.meta.get("ended")} if self.turns else {})
