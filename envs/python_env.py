"""The `python` environment: each assistant turn's tool calls run in the rollout's own session.

`start` checks the run gave a session pool; the session itself is acquired at the rollout's first
call (a rollout that never calls the tool costs no interpreter) and kept for the whole episode
(variables survive between calls, as in a notebook); `close` kills it. `step` parses the turn with
the run's tool format, runs each call in order, cuts each output to `max_observation_chars`
(saying so in the text) and answers with the format's observation; a turn without calls ends the
episode. Code that raises or times out is an observation (the session's `ToolOutcome`); a session
that cannot start or dies raises `SessionFailed`. The sandbox is sandbox/session.py's; this
module parses nothing itself and renders no tokens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.base import Message, Sample
from scalerl.envs.environment import (
    EnvContext,
    Environment,
    Reply,
    SessionFailed,
    ToolCall,
    ToolOutcome,
    register_environment,
)
from scalerl.envs.tool_format import PYTHON_TOOL, MalformedCall

log = logging.getLogger(__name__)
MIN_OBSERVATION_CHARS = 64
"""The smallest observation cap accepted (the cut note alone takes ~40 characters)."""


def check_limits(max_turns: Any, max_observation_chars: Any) -> tuple[int, int]:
    """The two per-task limits, checked: ValueError in one line naming the key and what is
    valid."""
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
    cap = max_observation_chars
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < MIN_OBSERVATION_CHARS:
        raise ValueError(f"max_observation_chars must be an integer >= {MIN_OBSERVATION_CHARS}, "
                         f"got {cap!r}")
    return max_turns, cap


def cut_observation(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters, keeping its head and its tail (a traceback's last
    line is the informative one) around a note saying how much was cut; (text, was it cut)."""
    if len(text) <= limit:
        return text, False
    note = "\n...[{} characters cut]...\n"
    room = max(limit - len(note.format(len(text))), 0)
    head, tail = room - room // 3, room // 3
    cut = len(text) - head - tail
    return text[:head] + note.format(cut) + (text[-tail:] if tail else ""), True


@dataclass
class PythonState:
    """One rollout's state: the run's context, its session once acquired, the calls made."""

    context: EnvContext
    session: Any = None
    calls: int = 0
    closed: bool = False
    """`close` ran (a cancelled rollout's may run while a step is still in flight)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Orders acquiring the session against closing it, so no session outlives its rollout."""


@register_environment("python")
class PythonEnvironment(Environment):
    """Tool-integrated reasoning with a sandboxed, persistent Python interpreter."""

    name = "python"

    def __init__(self, max_turns: int = 3, max_observation_chars: int = 2000) -> None:
        self.max_turns, self.max_observation_chars = check_limits(max_turns,
                                                                  max_observation_chars)

    def __repr__(self) -> str:
        return (f"PythonEnvironment(max_turns={self.max_turns}, "
                f"max_observation_chars={self.max_observation_chars})")

    def start(self, sample: Sample, context: EnvContext) -> PythonState:
        missing = [what for what in ("sessions", "tool_format") if getattr(context, what) is None]
        if missing:
            raise ValueError(f"environment 'python' (task {sample.task!r}) needs "
                             f"EnvContext.{' and '.join(missing)}: the run must have tools on")
        return PythonState(context)

    def step(self, sample: Sample, transcript: Sequence[Message], state: PythonState) -> Reply:
        if not transcript or transcript[-1].get("role") != "assistant":
            raise ValueError("environment 'python': step needs a transcript ending with an "
                             "assistant turn")
        fmt = state.context.tool_format
        calls = tuple(fmt.parse(str(transcript[-1].get("content") or "")))
        if not calls:
            return Reply(done=True)
        outcomes = tuple(self._run(call, state) for call in calls)
        return Reply(done=False, messages=tuple(fmt.observation(calls, outcomes)), calls=calls,
                     outcomes=outcomes)

    def close(self, state: PythonState) -> None:
        with state.lock:
            session, state.session, state.closed = state.session, None, True
        if session is None:
            return
        try:
            session.close()
        except Exception as exc:  # noqa: BLE001 - closing must not hide the rollout's own end
            log.warning("python environment: closing a session failed: %s: %s",
                        type(exc).__name__, exc)

    def _run(self, call: ToolCall, state: PythonState) -> ToolOutcome:
        """One call's outcome, its output cut to the cap; a malformed call is answered with its
        error and never run. SessionFailed (from acquire or run) propagates."""
        state.calls += 1
        error = call.error if isinstance(call, MalformedCall) else None
        if error is None and call.name != PYTHON_TOOL:
            error = f"unknown tool {call.name!r}; the only tool is {PYTHON_TOOL!r}"
        if error is not None:
            output, cut = cut_observation(error, self.max_observation_chars)
            return ToolOutcome("error", output, 0.0, truncated=cut)
        with state.lock:
            if state.closed:
                raise SessionFailed("the rollout ended while its tool call was waiting: "
                                    "its session is closed")
            if state.session is None:
                state.session = state.context.sessions.acquire()
            session = state.session
        outcome = session.run(call.code)
        output, cut = cut_observation(outcome.output, self.max_observation_chars)
        return ToolOutcome(outcome.status, output, outcome.latency_s,
                           truncated=cut or outcome.truncated)
