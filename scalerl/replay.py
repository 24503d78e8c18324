"""Replaying a multi-turn transcript offline: the task's environment answers given assistant turns.

`replay(task, sample, turns, context)` plays `turns` (the assistant texts of one rollout, from
another system or written by hand) against the task's environment as an episode would: each turn
is appended to the conversation and handed to `Environment.step` (the tool calls really run, in
the sandbox of `context`); a reply that is not done adds its observation before the next turn.
It stops where the episode would: the environment says done (later turns are not played, and
the result says so), or its `max_turns` are used. The verdict is the task's judge on the
assistant turns and observations joined by newlines: the episode's judge reads the whole decoded
completion (rollout/episode.py), whose chat-template markup a replay without a tokenizer cannot
write; the judges read the last boxed answer or the last fenced program, which sit in the
assistant turns either way. A sandbox that cannot start or dies (`SessionFailed`) is an `error`
verdict, as in an episode. Generation, tokens and budgets are not here (rollout/episode.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Sample, Score, truncate
from scalerl.envs.environment import EnvContext, SessionFailed
from scalerl.envs.grading import Grading
from scalerl.envs.task import Task

ENDINGS = ("done", "max_turns", "open")
"""`done`: the environment ended the episode; `max_turns`: its turns were used; `open`: the row
stopped while the environment waited for another turn."""


@dataclass(frozen=True)
class Replayed:
    """What a replay gave, besides the verdict."""

    messages: tuple[dict[str, str], ...]
    """The conversation after the prompt: each assistant turn and each observation."""
    tool_calls: tuple[dict[str, Any], ...]
    """Each call: the assistant turn's index, name, code and its outcome."""
    played: int
    """Assistant turns the environment answered (turns after the episode ended are not)."""
    ended: str

    def to_dict(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "tool_calls": list(self.tool_calls),
                "turns_played": self.played, "ended": self.ended}


def replay(task: Task, sample: Sample, turns: Sequence[str], context: EnvContext,
           grading: Grading) -> tuple[Score, Replayed]:
    """The verdict on `turns` played against `task.environment`, and what the replay gave.
    ValueError for a task without an environment or no turns."""
    env = task.environment
    if env is None:
        raise ValueError(f"task {task.name!r} has no environment (single-turn): give "
                         "\"completion\", not \"turns\"")
    if not turns:
        raise ValueError('"turns" is empty: give at least one assistant turn')
    transcript = list(sample.messages(task.system_prompt))
    messages: list[dict[str, str]] = []
    calls: list[dict[str, Any]] = []
    try:
        state = env.start(sample, context)
    except SessionFailed as exc:
        return Score("error", truncate(f"the environment could not start: {exc}")), Replayed(
            (), (), 0, "done")
    try:
        played, ended = _play(env, sample, turns, state, transcript, messages, calls)
    except SessionFailed as exc:
        return Score("error", truncate(f"the tool's sandbox failed: {exc}")), Replayed(
            tuple(messages), tuple(calls), len(calls), "done")
    finally:
        env.close(state)
    completion = "\n".join(m["content"] for m in messages)
    return task.score(sample, completion, grading), Replayed(tuple(messages), tuple(calls),
                                                             played, ended)


def _play(env, sample: Sample, turns: Sequence[str], state: Any, transcript: list,
          messages: list, calls: list) -> tuple[int, str]:
    """Play the turns; (turns played, how it ended). Fills `transcript`, `messages`, `calls`."""
    for k, text in enumerate(turns):
        turn = {"role": "assistant", "content": text}
        transcript.append(turn)
        messages.append(turn)
        reply = env.step(sample, tuple(transcript), state)
        for call, outcome in zip(reply.calls, reply.outcomes, strict=False):
            calls.append({"turn": k, "name": call.name, "code": call.code,
                          **outcome.to_dict()})
        if reply.done:
            return k + 1, "done"
        if k + 1 >= env.max_turns:
            return k + 1, "max_turns"
        observation = [dict(m) for m in reply.messages]
        transcript.extend(observation)
        messages.extend(observation)
    return len(turns), "open"
