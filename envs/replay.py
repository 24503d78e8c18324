"""Replaying a multi-turn transcript offline: the task's environment answers given assistant turns.

`replay(task, sample, turns, context)` plays `turns` (the assistant texts of one rollout, from
another system or written by hand) against the task's environment by the turn rule every loop
shares (envs/turns.py `Play`): the environment starts (its opening messages join the
conversation), each turn is appended and answered (the tool calls really run, in the sandbox of
`context`), and a reply that is not done adds its observation before the next turn. It stops where
an episode would: the environment says done (later turns are not played, and the result says
so), or its `max_turns` are used; `open` when the given turns run out first. The verdict is the
environment's own when it gives one, else the task's judge on the assistant turns and
observations joined by newlines: the episode's judge reads the whole decoded completion
(rollout/episode.py), whose chat-template markup a replay without a tokenizer cannot write; the
judges read the last boxed answer or the last fenced program, which sit in the assistant turns
either way. An environment that fails (its sandbox could not start or died, or it raised) is an
`error` verdict, as in an episode. Generation, tokens and budgets are not here (rollout/).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Sample, Score
from scalerl.envs.environment import EnvContext
from scalerl.envs.grading import Grading
from scalerl.envs.task import Task
from scalerl.envs.turns import EnvFailed, Play, call_records, prompt_with_opening

ENDINGS = ("done", "max_turns", "open", "session_failed", "env_error")
"""How a replay ended (envs/turns.py's endings a replay can reach)."""


@dataclass(frozen=True)
class Replayed:
    """What a replay gave, besides the verdict."""

    messages: tuple[dict[str, Any], ...]
    """The conversation after the prompt: each assistant turn and each observation."""
    tool_calls: tuple[dict[str, Any], ...]
    """Each call: the assistant turn's index, name, arguments and its outcome."""
    played: int
    """Assistant turns the environment answered (turns after the episode ended are not)."""
    ended: str
    opening: tuple[dict[str, Any], ...] = ()
    """The environment's opening messages (they completed the prompt)."""

    def to_dict(self) -> dict[str, Any]:
        out = {"messages": list(self.messages), "tool_calls": list(self.tool_calls),
               "turns_played": self.played, "ended": self.ended}
        return out | ({"opening": list(self.opening)} if self.opening else {})


def replay(task: Task, sample: Sample, turns: Sequence[str], context: EnvContext,
           grading: Grading) -> tuple[Score, Replayed]:
    """The verdict on `turns` played against `task.environment`, and what the replay gave.
    ValueError for a task without an environment or no turns."""
    if task.environment is None:
        raise ValueError(f"task {task.name!r} has no environment (single-turn): give "
                         "\"completion\", not \"turns\"")
    if not turns:
        raise ValueError('"turns" is empty: give at least one assistant turn')
    play = Play(task.environment, sample, context)
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    opening: tuple[dict[str, Any], ...] = ()
    try:
        opening = tuple(dict(m) for m in play.start())
        transcript = prompt_with_opening(sample.messages(task.system_prompt), opening)
        played, ended = _play(play, turns, transcript, messages, calls)
        completion = "\n".join(str(m["content"]) for m in messages)
        verdict = play.verdict(completion) or task.score(sample, completion, grading)
    except EnvFailed as failed:
        return failed.score, Replayed(tuple(messages), tuple(calls), len(calls), failed.ended,
                                      opening)
    finally:
        play.close()
    return verdict, Replayed(tuple(messages), tuple(calls), played, ended, opening)


def _play(play: Play, turns: Sequence[str], transcript: list, messages: list,
          calls: list) -> tuple[int, str]:
    """Play the turns; (turns played, how it ended). Fills `transcript`, `messages`, `calls`."""
    for k, text in enumerate(turns):
        turn = {"role": "assistant", "content": text}
        transcript.append(turn)
        messages.append(turn)
        answer = play.answer(transcript, k)
        calls += call_records(answer.reply, k)
        if answer.ended is not None:
            return k + 1, answer.ended
        observation = [dict(m) for m in answer.reply.messages]
        transcript.extend(observation)
        messages.extend(observation)
    return len(turns), "open"
