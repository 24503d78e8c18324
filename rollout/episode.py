"""The multi-turn episode of a task with an environment: turns, observations as tokens, limits.

`run_episode` plays a task's environment (envs/environment.py) by the turn rule every loop shares
(envs/turns.py `Play`): the environment's start (its opening messages, if any, complete the prompt,
rendered with the chat template before any token is sampled), an assistant turn, the
environment's reply (run on a thread pool off the event loop, so a slow tool call delays only its
own rollout), the observation appended as tokens, the next turn, until the environment says done
or a limit ends it. Token-exact: the rollout's tokens are the engine's
sampled tokens (with their logprobs and per-token policy versions, so turns may straddle an
in-flight update) and, after each turn the environment answers, the observation's tokens:
`tool_format.delta_text` (the exact text that follows the turn's last sampled token, shows the
observation and opens the next assistant turn) encoded alone, with no logprob (so the trainer's
mask leaves them out of the loss, as it does forced interruption tokens) and the policy version
at which they were appended. The next turn samples from the prompt plus every token so far: the
conversation is never re-tokenized.

Budgets: each turn is planned as a single-turn rollout is (its own sampled thinking budget and
forced interruption); the total (`Budget.hard_cap`: `total` when set) counts model and
observation tokens over the whole episode. The episode ends `truncated` when the environment's
`max_turns` are used without it saying done (`meta["ended"] = "max_turns"`), when a turn runs
out of its own budget (`turn_budget`), when the total has no room for the next observation or
turn (`budget`), or when the prompt and its turns would outgrow `max_model_len` (`max_model_len`:
the engine is never asked); `done` otherwise. A `SessionFailed` from the environment (its sandbox
could not start or died) makes the verdict `error` without scoring (`session_failed`), as does an
environment or tool format that raises (`env_error`, naming it). A prompt that the opening
messages make too long for its first turn is reported unsent (`prompt_too_long`), as a single-turn
one is. `Environment.close` runs once the episode ends and its verdict is in, whatever the end
(errors and cancellation included).

The verdict is the environment's own when it gives one (`Environment.verdict`, e.g. a game won
or a server's reward), else the task's judge on the whole completion, `decode(token_ids,
skip_special_tokens=True)`, observations included: the convention of tool-integrated reasoning
evaluation (ToRA, Qwen2.5-Math's TIR: the answer is read from the whole output, the last boxed
answer counts) and the single-turn rule
(a boxed answer in any turn counts as it would in one turn; the final turn, written after every
observation, has the last word). `Rollout.turns` records each turn (its raw text, special tokens
included, so the turns' texts joined are the completion's raw decoding) and `Rollout.tool_calls`
each call (name, arguments) with its outcome. Nothing here knows vLLM, the sandbox or a tool
format's syntax.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scalerl.envs.base import Message, Sample, Score
from scalerl.envs.environment import EnvContext, Environment, Reply, Turn
from scalerl.envs.turns import ENDINGS as ALL_ENDINGS
from scalerl.envs.turns import (
    TRUNCATING,
    EnvFailed,
    Play,
    call_records,
    env_failure,
    prompt_with_opening,
)
from scalerl.rollout import budget as B
from scalerl.rollout.turn import UNSCORED, Backend, Sampling, TurnResult, sample_turn
from scalerl.rollout.types import Budget, FinishReason, Rollout

log = logging.getLogger(__name__)
ENDINGS: tuple[str, ...] = tuple(e for e in ALL_ENDINGS if e != "open")
"""How a generated episode ends (`meta["ended"]`; `open` is a replay's only)."""
__all__ = ["ENDINGS", "TRUNCATING", "Episode", "run_episode"]


def first_turn_cap(budget: Budget, phrase_len: int) -> int:
    """The most tokens an episode's first turn may take: one turn's cap (thinking + phrase +
    answer, or the answer alone), within the total. A multi-turn prompt is refused unsent only
    when this does not fit `max_model_len`; later turns that would not fit end the episode."""
    one = budget.answer if budget.thinking is None else (budget.max_thinking + phrase_len
                                                         + budget.answer)
    return min(one, budget.hard_cap(phrase_len))


def turn_plan(budget: Budget, phrase_len: int, seed: int, room: int) -> B.Plan:
    """A turn's plan (its own thinking budget sampled as a single-turn rollout's), its cap cut
    to `room`: what is left of the total and of `max_model_len`."""
    plan = B.plan_rollout(budget, phrase_len, seed)
    return replace(plan, cap=min(plan.cap, room))


def ending_after_cut(used: int, total: int, context: int, max_model_len: int) -> str:
    """Why a turn that ran out of tokens ran out: `max_model_len`, the total `budget`, or its
    own (`turn_budget`)."""
    if context >= max_model_len:
        return "max_model_len"
    return "budget" if used >= total else "turn_budget"


def finish_reason(ended: str, last: FinishReason | None) -> FinishReason:
    """The episode's finish reason: `truncated` for a limit, else its last turn's."""
    if ended in TRUNCATING:
        return "truncated"
    return last or "stop"


@dataclass
class Transcript:
    """What an episode has produced so far (mutable, one per rollout)."""

    messages: list[Message]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    thinking: int = 0
    answer: int = 0
    interrupted: bool = False
    assistant_turns: int = 0
    observation_tokens: int = 0

    def add_turn(self, turn: TurnResult, raw: str, text: str, think_close: Sequence[int]) -> None:
        start = len(self.tokens)
        self.tokens += turn.tokens
        self.logprobs += turn.logprobs
        self.versions += turn.versions
        self.turns.append(Turn("assistant", raw, start, len(self.tokens), True))
        self.messages.append({"role": "assistant", "content": text})
        thinking, answer = B.count_phases(turn.tokens, think_close, turn.plan.thinking is not None)
        self.thinking += thinking
        self.answer += answer
        self.interrupted |= turn.interrupted
        self.assistant_turns += 1

    def add_reply(self, reply: Reply) -> None:
        self.calls += call_records(reply, len(self.turns) - 1)
        if reply.reward is not None:
            self.rewards.append(float(reply.reward))

    def add_observation(self, reply: Reply, ids: list[int], delta: str, version: int) -> None:
        start = len(self.tokens)
        self.tokens += ids
        self.logprobs += [None] * len(ids)
        self.versions += [version] * len(ids)
        roles = {m.get("role", "tool") for m in reply.messages}
        role = "tool" if "tool" in roles or not roles else sorted(roles)[0]
        self.turns.append(Turn(role, delta, start, len(self.tokens), False))
        self.messages += [dict(m) for m in reply.messages]
        self.observation_tokens += len(ids)


@dataclass
class Episode:
    """One rollout of a task with an environment (see the module docstring)."""

    gen: Backend
    sample: Sample
    group: int
    prompt: list[int]
    """The prompt's tokens (the environment's opening messages added at start, if any)."""
    budget: Budget
    sampling: Sampling
    seed: int | None
    env: Environment
    context: EnvContext
    executor: Any
    """The thread pool environment calls run on (off the event loop)."""
    ended: str = "done"
    error: Score | None = None
    too_long: bool = False
    """The opening messages made the prompt too long for its first turn (nothing sampled)."""
    cached: list[int] = field(default_factory=list)
    thinking_budgets: list[int | None] = field(default_factory=list)
    play: Play = field(init=False)

    def __post_init__(self) -> None:
        self.play = Play(self.env, self.sample, self.context)

    def turn_seed(self, k: int) -> int | None:
        if self.seed is None:
            return None
        return B.rollout_seed(self.seed, self.sample.id, self.group, "" if k == 0 else f"turn{k}")

    async def env_call(self, fn, *args):
        """`fn(*args)` (a `Play` call: failures already `EnvFailed`) on the thread pool."""
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, functools.partial(fn, *args))

    async def opened(self, tr: Transcript) -> bool:
        """Start the environment; its opening messages complete the prompt (re-rendered). False
        when the prompt no longer leaves room for a first turn."""
        opening = await self.env_call(self.play.start)
        if not opening:
            return True
        tr.messages[:] = prompt_with_opening(tr.messages, opening)
        tools = await self.env_call(self.play.tool_schemas)
        self.prompt = self.gen.render(tr.messages, tools)
        longest = first_turn_cap(self.budget, len(self.gen.phrase_ids(self.budget.phrase)))
        self.too_long = len(self.prompt) + longest > self.gen.max_model_len
        return not self.too_long

    async def turns(self, tr: Transcript) -> FinishReason | None:
        gen, phrase = self.gen, self.gen.phrase_ids(self.budget.phrase)
        total, limit = self.budget.hard_cap(len(phrase)), gen.max_model_len
        stop = tuple(getattr(self.context.tool_format, "stop", ()) or ())
        last: FinishReason | None = None
        for k in range(self.env.max_turns):
            room = min(total - len(tr.tokens), limit - len(self.prompt) - len(tr.tokens))
            if room <= 0:
                self.ended = "budget" if len(tr.tokens) >= total else "max_model_len"
                return last
            seed = self.turn_seed(k)
            plan = turn_plan(self.budget, len(phrase), seed or 0, room)
            self.thinking_budgets.append(plan.thinking)
            turn = await sample_turn(gen, self.prompt + tr.tokens, plan, phrase, self.sampling,
                                     seed, stop=stop, continuation=k > 0)
            self.cached += [turn.cached] + ([turn.continuation_cached]
                                            if turn.continuation_cached is not None else [])
            raw = gen.tokenizer.decode(turn.tokens, skip_special_tokens=False)
            tr.add_turn(turn, raw, gen.tokenizer.decode(turn.tokens, skip_special_tokens=True),
                        gen.think_close)
            last = turn.reason
            if turn.reason == "truncated":
                self.ended = ending_after_cut(len(tr.tokens), total,
                                              len(self.prompt) + len(tr.tokens), limit)
                return last
            if not await self.answer(tr, raw, total, limit, k):
                return last
        return last

    async def answer(self, tr: Transcript, raw: str, total: int, limit: int, k: int) -> bool:
        """The environment's reply to turn `k`, its observation appended; False when the
        episode ends here (`ended` set)."""
        answer = await self.env_call(self.play.answer, tuple(tr.messages), k)
        tr.add_reply(answer.reply)
        if answer.ended is not None:
            self.ended = answer.ended
            return False
        tok = self.gen.tokenizer
        try:
            tools = self.play.tool_schemas()
            delta = self.context.tool_format.delta_text(tok, answer.reply.messages, raw,
                                                        tools=tools)
        except Exception as exc:
            raise env_failure(self.env, "the tool format's delta_text", exc) from exc
        ids = tok.encode(delta, add_special_tokens=False)
        if len(tr.tokens) + len(ids) >= total:
            self.ended = "budget"
            return False
        if len(self.prompt) + len(tr.tokens) + len(ids) >= limit:
            self.ended = "max_model_len"
            return False
        tr.add_observation(answer.reply, ids, delta, self.gen.version)
        return True

    async def verdict(self, completion: str, score: bool) -> tuple[Score, float]:
        """(verdict, seconds): the environment's error, its own verdict, or the judge's."""
        if self.error is not None or not score:
            return self.error or UNSCORED, 0.0
        t1 = time.perf_counter()
        own = await self.env_call(self.play.verdict, completion)
        verdict = own if own is not None else await self.gen.judge(self.sample, completion)
        return verdict, time.perf_counter() - t1

    def close(self) -> None:
        """`Play.close` on the thread pool, not waited for (so it also runs when the rollout is
        cancelled); a failure is logged."""
        future = self.executor.submit(self.play.close)

        def logged(f) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("environment %r: close raised %r", self.env.name, f.exception())
        future.add_done_callback(logged)


async def run_episode(episode: Episode, score: bool) -> Rollout:
    """Play `episode` and judge it: the environment's `error` when it failed (not scored), its
    own verdict when it gives one, else the task's judge; then close it."""
    gen, sample = episode.gen, episode.sample
    t0 = time.perf_counter()
    tr = Transcript(messages=sample.messages(gen.system_prompt(sample.task)))
    last: FinishReason | None = None
    try:
        try:
            if await episode.opened(tr):
                last = await episode.turns(tr)
        except EnvFailed as failed:
            episode.ended, episode.error = failed.ended, failed.score
        if episode.too_long:
            longest = first_turn_cap(episode.budget, len(gen.phrase_ids(episode.budget.phrase)))
            return gen.too_long(sample, episode.prompt, longest, episode.group)
        gen_end = time.perf_counter()
        completion = gen.tokenizer.decode(tr.tokens, skip_special_tokens=True)
        verdict, score_s = await episode.verdict(completion, score)
    finally:
        episode.close()
    return _rollout(episode, tr, last, completion, verdict,
                    {"gen_s": gen_end - t0, "score_s": score_s, "gen_end": gen_end})


def _rollout(episode: Episode, tr: Transcript, last: FinishReason | None, completion: str,
             verdict: Score, timings: dict[str, float]) -> Rollout:
    sample, cached = episode.sample, episode.cached
    meta = {"thinking_budget": (episode.thinking_budgets or [None])[0],
            "cached_tokens": cached[0] if cached else 0,
            "continuation_cached_tokens": sum(cached[1:]) if len(cached) > 1 else None,
            "sampled_tokens": sum(lp is not None for lp in tr.logprobs),
            "observation_tokens": tr.observation_tokens, "turns": tr.assistant_turns,
            "tool_calls": len(tr.calls), "ended": episode.ended}
    if tr.rewards:
        meta["env_rewards"] = tr.rewards
    return Rollout(
        sample_id=sample.id, task=sample.task, prompt_token_ids=tuple(episode.prompt),
        token_ids=tuple(tr.tokens), logprobs=tuple(tr.logprobs), versions=tuple(tr.versions),
        finish_reason=finish_reason(episode.ended, last), thinking_tokens=tr.thinking,
        answer_tokens=tr.answer, completion=completion, score=verdict, group=episode.group,
        interrupted=tr.interrupted, timings=timings, meta=meta, turns=tuple(tr.turns),
        tool_calls=tuple(tr.calls))
