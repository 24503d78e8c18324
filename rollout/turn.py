"""One assistant turn under its budgets, and the single-turn rollout made of one.

`sample_turn` samples one assistant turn in at most two requests: phase 1 up to the thinking
budget, then, per rollout/budget.py, the forced interruption phrase (tokens with no logprob, the
policy version at injection) and phase 2 up to the answer budget. A turn ends at EOS or at one of
the `stop` strings a multi-turn tool format gives (kept in its tokens). `single_turn` is the
rollout of a task without an environment: one turn after the prompt, then the verdict;
rollout/episode.py chains turns for a task with one. Both run on the generator's event loop and
reach it only through its public turn interface (`Backend`); nothing here knows vLLM.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scalerl.envs.base import Sample, Score
from scalerl.rollout import budget as B
from scalerl.rollout.types import Budget, FinishReason, Rollout

UNSCORED = Score(status="error", detail="not scored (score=False)")


class Backend(Protocol):
    """What turns and episodes use of their generator: its public turn interface
    (rollout/base_generator.py `BaseGenerator`, which both backends subclass)."""

    tokenizer: Any
    max_model_len: int
    think_close: tuple[int, ...]
    """The tokens of `</think>`."""

    @property
    def version(self) -> int: ...

    async def sample(self, prompt: list[int], max_tokens: int, temperature: float,
                     seed: int | None, top_p: float = 1.0, priority: int = 0,
                     stop: tuple[str, ...] = ()) -> Any: ...

    def phrase_ids(self, phrase: str) -> tuple[int, ...]: ...

    def system_prompt(self, task: str) -> str | None: ...

    async def judge(self, sample: Sample, completion: str) -> Score: ...


@dataclass(frozen=True)
class Sampling:
    """How one rollout samples: temperature, nucleus, the call's priority (base_generator)."""

    temperature: float
    top_p: float = 1.0
    priority: int = 0


@dataclass(frozen=True)
class TurnResult:
    """One assistant turn: its tokens (forced ones included, logprob None) and how it ended."""

    tokens: list[int]
    logprobs: list[float | None]
    versions: list[int]
    reason: FinishReason
    interrupted: bool
    plan: B.Plan
    cached: int
    """Prompt tokens the turn's first request took from the prefix cache."""
    continuation_cached: int | None
    """The same for its second request (None: it had none)."""


def phase_priority(priority: int, continuation: bool) -> int:
    """The vLLM priority of one request of a rollout whose call had `priority`: `2 * priority`
    for its first request, one less for every later one (base_generator's module docstring)."""
    return 2 * priority - (1 if continuation else 0)


async def sample_turn(gen: Backend, context: list[int], plan: B.Plan,
                      phrase: Sequence[int], sampling: Sampling, seed: int | None, *,
                      stop: tuple[str, ...] = (), continuation: bool = False) -> TurnResult:
    """One assistant turn after `context` (prompt and earlier turns) under `plan`: phase 1 up
    to the thinking budget, then (rollout/budget.py) the forced `phrase` and phase 2. `stop`
    strings end it as EOS does (kept in its tokens). `continuation`: not the rollout's first
    request (scheduled as a continuation is)."""
    kwargs = {"stop": stop} if stop else {}
    first = await gen.sample(context, B.first_phase_tokens(plan), sampling.temperature, seed,
                             sampling.top_p, priority=phase_priority(sampling.priority,
                                                                     continuation), **kwargs)
    step = B.after_first_phase(plan, first.tokens, first.ended, gen.think_close, phrase)
    k = step.keep
    tokens, versions = first.tokens[:k], first.versions[:k]
    logprobs: list[float | None] = [float(x) for x in first.logprobs[:k]]
    if not isinstance(step, B.Continue):
        return TurnResult(tokens, logprobs, versions, step.finish_reason, False, plan,
                          first.cached, None)
    tokens += list(step.forced)
    logprobs += [None] * len(step.forced)
    versions += [gen.version] * len(step.forced)
    seed2 = None if seed is None else seed ^ 0x5EED
    second = await gen.sample(context + tokens, step.max_tokens, sampling.temperature, seed2,
                              sampling.top_p, priority=phase_priority(sampling.priority, True),
                              **kwargs)
    return TurnResult(tokens + second.tokens, logprobs + list(second.logprobs),
                      versions + list(second.versions), B.final_reason(step, second.ended),
                      bool(step.forced), plan, first.cached, second.cached)


async def single_turn(gen: Backend, sample: Sample, group: int, prompt: list[int],
                      budget: Budget, sampling: Sampling, seed: int | None,
                      score: bool) -> Rollout:
    """The rollout of a task without an environment: one turn, scored on its whole text."""
    t0 = time.perf_counter()
    rseed = None if seed is None else B.rollout_seed(seed, sample.id, group)
    phrase = gen.phrase_ids(budget.phrase)
    plan = B.plan_rollout(budget, len(phrase), rseed or 0)
    turn = await sample_turn(gen, prompt, plan, phrase, sampling, rseed)
    tokens, logprobs = turn.tokens, turn.logprobs
    gen_end = time.perf_counter()
    thinking, answer = B.count_phases(tokens, gen.think_close, plan.thinking is not None)
    completion = gen.tokenizer.decode(tokens, skip_special_tokens=True)
    verdict, score_s = UNSCORED, 0.0
    if score:
        t1 = time.perf_counter()
        verdict = await gen.judge(sample, completion)
        score_s = time.perf_counter() - t1
    return Rollout(
        sample_id=sample.id, task=sample.task, prompt_token_ids=tuple(prompt),
        token_ids=tuple(tokens), logprobs=tuple(logprobs), versions=tuple(turn.versions),
        finish_reason=turn.reason, thinking_tokens=thinking, answer_tokens=answer,
        completion=completion, score=verdict, group=group, interrupted=turn.interrupted,
        timings={"gen_s": gen_end - t0, "score_s": score_s, "gen_end": gen_end},
        meta={"thinking_budget": plan.thinking, "cached_tokens": turn.cached,
              "continuation_cached_tokens": turn.continuation_cached,
              "sampled_tokens": len(tokens) - sum(lp is None for lp in logprobs)})
