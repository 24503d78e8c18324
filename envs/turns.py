"""The turn rule: how an environment's episode starts, goes on after each turn, and ends.

Every loop that plays an environment follows it through `Play`, whatever writes the assistant
turns: the generator's token-exact episodes (rollout/episode.py), `scalerl score`'s replay of given
turns (scalerl/tasks/replay.py) and the tiny tool model's check (scalerl/tiny/tools.py). `start`
makes the rollout's state and returns the environment's opening messages; `answer` hands it one
assistant turn and says whether the episode goes on (the observation's messages) or ends, and
how; `verdict` is the environment's own verdict, if it gives one, on the finished episode;
`close` releases the state (always, once). Whatever an environment raises becomes `EnvFailed`
with an `error` Score: `SessionFailed` (its sandbox could not start or died) ends the episode
`session_failed`, anything else `env_error`, naming the environment and the call.

How an episode ends (`ENDINGS`, recorded as `meta["ended"]`): `done` (the environment said so),
`max_turns` (its turns used without done), `turn_budget`, `budget`, `max_model_len` (the
generator's token limits), `session_failed`, `env_error`, and `open` (a replay whose given turns
ran out while the environment waited for more). Budgets and tokens are the caller's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Message, Sample, Score, truncate
from scalerl.envs.environment import EnvContext, Environment, Reply, SessionFailed

ENDINGS: tuple[str, ...] = ("done", "max_turns", "turn_budget", "budget", "max_model_len",
                            "session_failed", "env_error", "open")
"""How an episode ended (module docstring)."""
TRUNCATING = frozenset({"max_turns", "turn_budget", "budget", "max_model_len"})
"""Endings that make the rollout `truncated`."""
FAILED = frozenset({"session_failed", "env_error"})
"""Endings whose verdict is the environment's `error`, never scored."""


class EnvFailed(Exception):
    """The environment (or its tool format) failed: the rollout's verdict is `error`."""

    def __init__(self, ended: str, score: Score) -> None:
        super().__init__(score.detail)
        self.ended, self.score = ended, score


def env_failure(env: Environment, what: str, exc: BaseException) -> EnvFailed:
    """`SessionFailed` -> `session_failed`; anything else an environment raises -> `env_error`,
    naming the environment, the call and the exception."""
    if isinstance(exc, SessionFailed):
        return EnvFailed("session_failed", Score("error", truncate(f"tool session failed: "
                                                                   f"{exc}")))
    name = env.name or type(env).__name__
    return EnvFailed("env_error", Score("error", truncate(
        f"environment {name!r}: {what} raised {type(exc).__name__}: {exc}")))


@dataclass(frozen=True)
class Answer:
    """The environment's answer to one assistant turn."""

    reply: Reply
    ended: str | None
    """None: the episode goes on with `reply.messages`; else how it ended here."""


def prompt_with_opening(messages: Sequence[Message], opening: Sequence[Message]) -> list[dict]:
    """The prompt's messages completed by the environment's opening ones: one of the same role as
    the prompt's last message extends it (its text appended, as TRL appends `reset`'s text to
    the last user turn); the others follow."""
    out = [dict(m) for m in messages]
    for m in opening:
        if out and m.get("role") == out[-1].get("role"):
            out[-1]["content"] = f"{out[-1].get('content') or ''}{m.get('content') or ''}"
        else:
            out.append(dict(m))
    return out


class Play:
    """One episode of `env` on `sample` under the run's `context` (module docstring)."""

    def __init__(self, env: Environment, sample: Sample, context: EnvContext) -> None:
        self.env, self.sample, self.context = env, sample, context
        self.state: Any = None
        self.started = self.closed = False
        self._lock = threading.Lock()
        """Orders `start` against `close`: a rollout cancelled while its start runs on a thread
        closes the state the start returns, once it returns."""

    def _guard(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:
            raise env_failure(self.env, what, exc) from exc

    def start(self) -> tuple[Message, ...]:
        """Start the episode; the environment's opening messages (EnvFailed on failure, or when
        the episode was closed while it started: its state is then closed at once)."""
        state = self._guard("start", self.env.start, self.sample, self.context)
        with self._lock:
            self.state, self.started, closed = state, True, self.closed
        if closed:
            self.env.close(state)
            raise EnvFailed("env_error", Score("error", "the rollout ended while its "
                                                        "environment was starting"))
        opening = self._guard("opening", self.env.opening, self.state)
        return tuple(opening or ())

    def tool_schemas(self) -> list[dict]:
        """The schemas of this rollout's tools (for the prompt's chat template)."""
        return list(self._guard("tool_schemas", self.env.tool_schemas, self.state) or [])

    def answer(self, transcript: Sequence[Message], turn: int) -> Answer:
        """The environment's answer to assistant turn `turn` (0-based), the last message of
        `transcript`: `done`, `max_turns` when it was the last allowed, else None (go on)."""
        reply = self._guard("step", self.env.step, self.sample, tuple(transcript), self.state)
        if not isinstance(reply, Reply):
            raise env_failure(self.env, "step", TypeError(
                f"returned {type(reply).__name__}, not a Reply"))
        if len(reply.calls) != len(reply.outcomes):
            raise env_failure(self.env, "step", ValueError(
                f"{len(reply.calls)} calls but {len(reply.outcomes)} outcomes"))
        if reply.done:
            return Answer(reply, "done")
        if turn + 1 >= self.env.max_turns:
            return Answer(reply, "max_turns")
        if not reply.messages:
            raise env_failure(self.env, "step", ValueError(
                "an answer that is not done needs an observation (messages)"))
        return Answer(reply, None)

    def verdict(self, completion: str) -> Score | None:
        """The environment's own verdict on the finished episode (None: the task's judge
        decides); a verdict hook that raises or returns something else is an `error`."""
        try:
            verdict = self.env.verdict(self.sample, self.state, completion)
        except Exception as exc:  # noqa: BLE001 - a broken verdict is an error verdict
            return env_failure(self.env, "verdict", exc).score
        if verdict is not None and not isinstance(verdict, Score):
            return Score("error", f"environment {self.env.name or type(self.env).__name__!r}: "
                                  f"verdict returned {type(verdict).__name__}, not a Score")
        return verdict

    def close(self) -> None:
        """Release the state (once; nothing when start failed; a start still running closes
        its state when it returns). Raises what close raises."""
        with self._lock:
            run = self.started and not self.closed
            self.closed = True
        if run:
            self.env.close(self.state)


def call_records(reply: Reply, turn: int) -> list[dict[str, Any]]:
    """`Rollout.tool_calls` rows of one answered turn: the turn, the call, its outcome."""
    return [{"turn": turn, **call.to_dict(), **outcome.to_dict()}
            for call, outcome in zip(reply.calls, reply.outcomes, strict=True)]
