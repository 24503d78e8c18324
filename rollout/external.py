"""Episodes played outside the generator: a verifiers taskset's, by verifiers' own harness.

A task whose environment says `played_elsewhere` (envs/adapters/verifiers.py) is not played
turn by turn here: `external_rollout` hands the whole episode to the environment's `play` with
what its harness needs of this generator (a vLLM server's URL: the prompt's server under the
pool's affinity; the sampling settings, one turn's token cap, the rollout's seed and priority;
the cache salt this client's own requests carry, with the policy version the episode starts
under, kept by every call of the episode as a rollout's phases keep theirs; `max_model_len`),
and makes a Rollout of what comes back: the tokens the server sampled, with their logprobs and
the weight version the server labelled each one with, and the environment's tokens between them
(no logprob, out of the loss), decoded with this generator's tokenizer. The verdict is the
taskset's (its reward), else the task's judge. Only the vLLM servers' generator can do this (its
servers are what a harness can reach); an in-process engine, an episode that fails or outlives
`timeout_s`, or a trace that is not one token-exact sequence gives the verdict `error` (never a
0 reward). Not kept: forced interruption, the thinking budget, the total budget across turns;
the episode's sampled tokens count in `progress()` when it ends (docs/environments-verifiers.md).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from scalerl.envs.base import Sample, Score, truncate
from scalerl.envs.environment import Turn
from scalerl.rollout import budget as B
from scalerl.rollout import turn as T
from scalerl.rollout.types import Budget, Rollout


def failed(gen: Any, sample: Sample, group: int, prompt: list[int], detail: str,
           t0: float) -> Rollout:
    """The rollout of an episode that failed: no tokens, verdict `error` saying why."""
    now = time.perf_counter()
    return Rollout(sample_id=sample.id, task=sample.task, prompt_token_ids=tuple(prompt),
                   token_ids=(), logprobs=(), versions=(), finish_reason="stop",
                   thinking_tokens=0, answer_tokens=0, completion="", group=group,
                   score=Score("error", truncate(detail)),
                   timings={"gen_s": now - t0, "score_s": 0.0, "gen_end": now},
                   meta={"ended": "env_error"})


async def settings_for(gen: Any, sample: Sample, group: int, budget: Budget,
                       sampling: T.Sampling, seed: int | None) -> dict[str, Any]:
    """What the environment's harness needs of this generator (module docstring)."""
    server = await gen.pool.acquire()
    cap = budget.answer if budget.thinking is None else budget.max_thinking + budget.answer
    return {"base_url": server.url, "tokenizer": gen.model_path, "salt": f"{gen._salt}-v"
            f"{gen.version}", "max_model_len": gen.max_model_len,
            "seed": None if seed is None else B.rollout_seed(seed, sample.id, group),
            "priority": T.phase_priority(sampling.priority, False),
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                         "top_k": 0, "max_tokens": min(cap, budget.hard_cap(0))}}


async def external_rollout(gen: Any, sample: Sample, group: int, prompt: list[int],
                           budget: Budget, sampling: T.Sampling, seed: int | None,
                           score: bool, env: Any) -> Rollout:
    """One episode of `sample` played by `env` (module docstring)."""
    t0 = time.perf_counter()
    if getattr(gen, "pool", None) is None:
        return failed(gen, sample, group, prompt, f"task {sample.task!r} is played by its own "
                      "harness against vLLM servers: generate with --server URL (engine.servers)"
                      ", not the in-process engine", t0)
    settings = await settings_for(gen, sample, group, budget, sampling, seed)
    # off the event loop: the first call may wait for the environment's process to start
    rid, future = await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(env.play, sample, **settings))
    try:
        played = await asyncio.wait_for(asyncio.wrap_future(future), env.timeout_s)
    except (TimeoutError, asyncio.CancelledError) as exc:
        env.cancel(rid)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return failed(gen, sample, group, prompt, f"the episode outlived timeout_s "
                      f"{env.timeout_s:g} s", t0)
    except Exception as exc:  # noqa: BLE001 - a failed episode is an `error` verdict
        return failed(gen, sample, group, prompt, str(exc) or type(exc).__name__, t0)
    gen_end = time.perf_counter()
    gen._sampled_total += sum(lp is not None for lp in played.logprobs)
    return await _rollout(gen, sample, group, played, score, t0, gen_end, budget)


async def _rollout(gen: Any, sample: Sample, group: int, played: Any, score: bool, t0: float,
                   gen_end: float, budget: Budget) -> Rollout:
    tok = gen.tokenizer
    completion = tok.decode(list(played.tokens), skip_special_tokens=True)
    turns = tuple(Turn(s.role, tok.decode(list(played.tokens[s.start:s.end]),
                                          skip_special_tokens=False), s.start, s.end, s.trained)
                  for s in played.segments)
    verdict = played.score
    t1 = time.perf_counter()
    if not score:
        verdict = T.UNSCORED
    elif verdict is None:
        verdict = await gen.judge(sample, completion)
    sampled = [t for t, lp in zip(played.tokens, played.logprobs, strict=True) if lp is not None]
    thinking, answer = B.count_phases(sampled, gen.think_close, budget.thinking is not None)
    meta = {**played.meta, "ended": played.ended, "turns": sum(s.trained for s in played.segments),
            "sampled_tokens": len(sampled),
            "observation_tokens": len(played.tokens) - len(sampled)}
    return Rollout(
        sample_id=sample.id, task=sample.task, prompt_token_ids=played.prompt,
        token_ids=played.tokens, logprobs=played.logprobs, versions=played.versions,
        finish_reason=played.finish, thinking_tokens=thinking, answer_tokens=answer,
        completion=completion, score=verdict, group=group, timings={
            "gen_s": gen_end - t0, "score_s": time.perf_counter() - t1, "gen_end": gen_end},
        meta=meta, turns=turns)
