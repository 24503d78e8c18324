"""Thinking/answer budgets and forced interruption, as pure token accounting (no engine).

A rollout runs in at most two engine requests. Phase 1 samples up to the thinking budget (it does
not stop at `</think>`, so a trace that closes its thinking and answers within the budget needs
one request). If the budget ran out with thinking still open, the interruption phrase is injected
(forced tokens) and phase 2 samples up to the answer budget; if thinking closed but the answer
was cut by the phase-1 limit, phase 2 continues the answer. Over-long answers are cut to the
answer budget. `Budget.thinking=None` means no thinking format: one phase, answer budget only.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from scalerl.rollout.types import Budget, FinishReason


@dataclass(frozen=True)
class Plan:
    """The budgets of one rollout, with a range already sampled."""

    thinking: int | None
    """Thinking budget of this rollout (None: no thinking format)."""
    answer: int
    cap: int
    """Hard cap on completion tokens, forced ones included."""


@dataclass(frozen=True)
class Continue:
    """Run phase 2: inject `forced` tokens after `keep` phase-1 tokens, then sample `max_tokens`."""

    keep: int
    forced: tuple[int, ...]
    max_tokens: int
    reason_if_stopped: FinishReason
    """`interrupted` after a forced phrase, `stop` after a natural `</think>`."""


@dataclass(frozen=True)
class Done:
    """The rollout is finished after phase 1: keep the first `keep` tokens."""

    keep: int
    finish_reason: FinishReason


def rollout_seed(seed: int, sample_id: str, group: int, salt: str = "") -> int:
    """A stable 63-bit seed per (run seed, sample, group, purpose)."""
    digest = hashlib.blake2b(f"{seed}|{sample_id}|{group}|{salt}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


def plan_rollout(budget: Budget, phrase_len: int, seed: int) -> Plan:
    """Sample the thinking budget (uniform over an inclusive range) and fix the hard cap
    (`Budget.hard_cap` at the sampled thinking budget)."""
    if budget.thinking is None:
        thinking = None
    elif isinstance(budget.thinking, tuple):
        thinking = random.Random(seed).randint(*budget.thinking)
    else:
        thinking = budget.thinking
    return Plan(thinking=thinking, answer=budget.answer, cap=budget.hard_cap(phrase_len, thinking))


def first_phase_tokens(plan: Plan) -> int:
    """max_tokens of the phase-1 request."""
    if plan.thinking is None:
        return min(plan.answer, plan.cap)
    return min(plan.thinking, plan.cap)


def find_subsequence(tokens: Sequence[int], pattern: Sequence[int]) -> int:
    """Index just past the first occurrence of `pattern` in `tokens`, or -1."""
    n = len(pattern)
    if n == 0:
        return -1
    first = pattern[0]
    for i, tok in enumerate(tokens):
        if tok == first and tuple(tokens[i : i + n]) == tuple(pattern):
            return i + n
    return -1


def after_first_phase(
    plan: Plan,
    tokens: Sequence[int],
    ended: bool,
    think_close: Sequence[int],
    phrase: Sequence[int],
) -> Continue | Done:
    """What to do after phase 1 sampled `tokens`; `ended` is True when it stopped on EOS."""
    n = len(tokens)
    if plan.thinking is None:
        return Done(n, "stop" if ended else "truncated")
    close = find_subsequence(tokens, think_close)
    if close >= 0:
        answered = n - close
        if answered > plan.answer:
            return Done(close + plan.answer, "truncated")
        if ended:
            return Done(n, "stop")
        room = min(plan.answer - answered, plan.cap - n)
        if room <= 0:
            return Done(n, "truncated")
        return Continue(keep=n, forced=(), max_tokens=room, reason_if_stopped="stop")
    if ended:
        return Done(n, "stop")
    room = min(plan.answer, plan.cap - n - len(phrase))
    if room <= 0:
        return Done(n, "truncated")
    return Continue(keep=n, forced=tuple(phrase), max_tokens=room, reason_if_stopped="interrupted")


def final_reason(step: Continue, ended: bool) -> FinishReason:
    """Finish reason after phase 2: stopping on EOS keeps the planned reason; else truncated."""
    return step.reason_if_stopped if ended else "truncated"


def count_phases(
    tokens: Sequence[int], think_close: Sequence[int], thinking: bool
) -> tuple[int, int]:
    """(thinking_tokens, answer_tokens): thinking runs up to and including `</think>` (forced
    phrase included); with thinking off, or no `</think>` in a thinking rollout, see below.

    No thinking format: all tokens are answer. Thinking never closed: all tokens are thinking.
    """
    if not thinking:
        return 0, len(tokens)
    close = find_subsequence(tokens, think_close)
    if close < 0:
        return len(tokens), 0
    return close, len(tokens) - close


def parse_thinking(text: str | None) -> int | tuple[int, int] | None:
    """A thinking budget from command-line text: `A`, `A:B` (a range sampled per rollout), or
    None / "none" (no thinking format). Raises ValueError saying what is expected."""
    if not text or text.lower() == "none":
        return None
    try:
        parts = [int(x) for x in text.split(":")]
    except ValueError:
        raise ValueError(f"thinking budget {text!r}: expected A or A:B (integers) or none"
                         ) from None
    if len(parts) not in (1, 2):
        raise ValueError(f"thinking budget {text!r}: expected A or A:B (integers) or none")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])

