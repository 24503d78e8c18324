"""`ToolEnvironment`: an environment whose answers are tool calls' outputs.

Write a tool environment three ways, all the same class underneath:
- `ToolEnvironment(tools=[lookup, "python"])`: typed functions (and the built-in sandboxed
  `python`), stateless between calls;
- a subclass whose public methods are its tools: each rollout gets its own instance
  (`type(self)()`, or `spawn()` when the constructor needs arguments), so tools keep state (a
  board, a file system, a connection) and `close()` releases it;
- any class in TRL's `environment_factory` shape (envs/adapters/trl.py): a factory per rollout.

The per-rollout object's optional hooks, TRL's names: `reset(**row)` (the sample's fields:
`prompt`, `answer`, `tests`, its meta) returns the first observation (text appended to the prompt's
last user message) or None; `get_reward()` or a `reward` attribute/method gives the verdict, a
float credit mapped through `reward_range` (default [0, 1]; 1 is `correct`) or a bool or a Score;
a truthy `done` attribute after a turn's calls ends the episode; `cleanup()` (or `close()` on a
class that is not a ToolEnvironment, whose `close(state)` is the environment's own) releases it.
Without a reward the task's judge gives the verdict, as for any environment.

Each turn's calls are parsed by the run's tool format; an unknown tool or arguments that do not
fit its schema are an `error` observation naming what is valid; a function runs off the caller's
thread with `tool_timeout_s` and its output is cut to `max_observation_chars` (envs/tools.py);
`python` runs in the rollout's sandboxed session, acquired at its first call. A turn without calls
ends the episode.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.base import Message, Sample, Score
from scalerl.envs.environment import (
    EnvContext,
    Environment,
    Reply,
    SessionFailed,
    ToolCall,
    ToolOutcome,
)
from scalerl.envs.tools import (
    PYTHON_TOOL,
    Tool,
    ToolError,
    call_tool,
    check_limits,
    load_tool,
    method_tools,
    outcome,
)

log = logging.getLogger(__name__)
DEFAULT_TOOL_TIMEOUT_S = 30.0
"""A function tool's per-call time limit unless the environment sets `tool_timeout_s`."""


@dataclass
class ToolState:
    """One rollout: the run's context, its per-rollout object, its tools, its session."""

    context: EnvContext
    obj: Any
    """The per-rollout object whose methods are tools (None for function tools only)."""
    tools: dict[str, Tool]
    opening: tuple[Message, ...] = ()
    session: Any = None
    calls: int = 0
    closed: bool = False
    """`close` ran (a cancelled rollout's may run while a step is still in flight)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Orders acquiring the session against closing it, so no session outlives its rollout."""


class ToolEnvironment(Environment):
    """Typed Python tools between the model's turns (see the module docstring)."""

    name = "tools"
    max_turns: int = 4
    max_observation_chars: int = 2000
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    reward_range: tuple[float, float] = (0.0, 1.0)
    """A per-rollout object's reward, mapped linearly onto credit in [0, 1]."""

    def __init__(self, tools: Sequence[str | Callable[..., Any] | Tool] = (), *,
                 max_turns: int | None = None, max_observation_chars: int | None = None,
                 tool_timeout_s: float | None = None,
                 reward_range: Sequence[float] | None = None) -> None:
        self.tools = tuple(load_tool(t) for t in tools)
        self.max_turns, self.max_observation_chars = check_limits(
            self.max_turns if max_turns is None else max_turns,
            self.max_observation_chars if max_observation_chars is None
            else max_observation_chars)
        if tool_timeout_s is not None:
            self.tool_timeout_s = tool_timeout_s
        if isinstance(self.tool_timeout_s, bool) or not self.tool_timeout_s > 0:
            raise ValueError(f"tool_timeout_s must be a number > 0, got {self.tool_timeout_s!r}")
        if reward_range is not None:
            self.reward_range = check_range(reward_range)
        self._schema_tools = self._tools_of(self.probe())

    def __repr__(self) -> str:
        tools = [t.name for t in getattr(self, "_schema_tools", self.tools)]
        return f"{type(self).__name__}(tools={tools}, max_turns={self.max_turns})"

    # --- the per-rollout object ------------------------------------------------------------
    def spawn(self) -> Any:
        """The per-rollout object: None for function tools only; a subclass's fresh instance
        (`type(self)()`) when it defines method tools. Override when the constructor needs
        arguments."""
        if type(self) is ToolEnvironment or len(self._schema_tools) == len(self.tools):
            return None
        return type(self)()

    def probe(self) -> Any:
        """An object whose methods show the tools' schemas (the shared instance itself)."""
        return self if type(self) is not ToolEnvironment else None

    def _tools_of(self, obj: Any) -> tuple[Tool, ...]:
        methods = method_tools(obj) if obj is not None else ()
        tools = self.tools + methods
        names = [t.name for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ToolError(f"{type(self).__name__}: tool names must be unique; "
                            f"{', '.join(dupes)} given twice")
        return tools

    # --- the Environment API ---------------------------------------------------------------
    def tool_schemas(self, state: Any = None) -> list[dict[str, Any]]:
        tools = state.tools.values() if isinstance(state, ToolState) else self._schema_tools
        return [t.schema() for t in tools]

    def start(self, sample: Sample, context: EnvContext) -> ToolState:
        obj = self.spawn()
        tools = {t.name: t for t in self._tools_of(obj)}
        needs = ["tool_format"] + (["sessions"] if PYTHON_TOOL in tools else [])
        missing = [what for what in needs if getattr(context, what) is None]
        if missing:
            raise ValueError(f"environment {self.name!r} (task {sample.task!r}) needs "
                             f"EnvContext.{' and '.join(missing)}: the run must have tools on")
        fmt = context.tool_format
        if fmt.tool_names is not None and set(tools) - set(fmt.tool_names):
            raise ValueError(f"tool format {fmt.name!r} writes only {', '.join(fmt.tool_names)}; "
                             f"task {sample.task!r} has tools {', '.join(tools)}: use "
                             "tool_format chat (a chat template that renders tools)")
        state = ToolState(context, obj, tools)
        reset = getattr(obj, "reset", None)
        if callable(reset):
            state.opening = opening_messages(reset(**sample_row(sample)))
        return state

    def opening(self, state: ToolState) -> tuple[Message, ...]:
        return state.opening

    def step(self, sample: Sample, transcript: Sequence[Message], state: ToolState) -> Reply:
        if not transcript or transcript[-1].get("role") != "assistant":
            raise ValueError(f"environment {self.name!r}: step needs a transcript ending with "
                             "an assistant turn")
        fmt = state.context.tool_format
        calls = tuple(fmt.parse(str(transcript[-1].get("content") or "")))
        if not calls:
            return Reply(done=True)
        outcomes = tuple(self._run(call, state) for call in calls)
        done = bool(getattr(state.obj, "done", False))
        return Reply(done=done, messages=() if done else tuple(fmt.observation(calls, outcomes)),
                     calls=calls, outcomes=outcomes)

    def verdict(self, sample: Sample, state: ToolState, completion: str) -> Score | None:
        value = reward_of(state.obj)
        return None if value is None else credit_score(value, self.reward_range)

    def close(self, state: ToolState) -> None:
        with state.lock:
            session, state.session, state.closed = state.session, None, True
        for what, fn in (("session", getattr(session, "close", None)),
                         ("object", release_hook(state.obj))):
            if not callable(fn):
                continue
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - closing must not hide the rollout's end
                log.warning("environment %r: closing its %s failed: %s: %s", self.name, what,
                            type(exc).__name__, exc)

    # --- one call --------------------------------------------------------------------------
    def _run(self, call: ToolCall, state: ToolState) -> ToolOutcome:
        """One call's outcome; a malformed call or an unknown tool is answered with the error
        and never run. SessionFailed (the python tool's sandbox) propagates."""
        state.calls += 1
        cap = self.max_observation_chars
        error = getattr(call, "error", None) or None
        tool = state.tools.get(call.name)
        if error is None and tool is None:
            error = (f"unknown tool {call.name!r}; the tools are "
                     f"{', '.join(repr(n) for n in state.tools)}")
        if error is not None:
            return outcome("error", error, 0.0, cap)
        if tool.fn is not None:
            return call_tool(tool, call.arguments, self.tool_timeout_s, cap)
        problem = tool.problem(call.arguments)
        if problem is not None:
            return outcome("error", problem, 0.0, cap)
        return self._python(call.code, state)

    def _python(self, code: str, state: ToolState) -> ToolOutcome:
        with state.lock:
            if state.closed:
                raise SessionFailed("the rollout ended while its tool call was waiting: "
                                    "its session is closed")
            if state.session is None:
                state.session = state.context.sessions.acquire()
            session = state.session
        result = session.run(code)
        cut = outcome(result.status, result.output, result.latency_s, self.max_observation_chars)
        return ToolOutcome(cut.status, cut.output, cut.latency_s,
                           truncated=cut.truncated or result.truncated)


def release_hook(obj: Any) -> Callable[[], Any] | None:
    """What releases a per-rollout object: its `cleanup()`, else the `close()` of an object that
    is not itself an Environment (whose `close(state)` is the environment's own)."""
    hook = getattr(obj, "cleanup", None)
    if callable(hook):
        return hook
    close = getattr(obj, "close", None)
    return close if callable(close) and not isinstance(obj, Environment) else None


def sample_row(sample: Sample) -> dict[str, Any]:
    """The sample as a dataset row for `reset(**row)`: `prompt` (text, or messages), `answer`,
    `tests` when set, and its meta's fields."""
    row: dict[str, Any] = {"prompt": sample.prompt if isinstance(sample.prompt, str)
                           else [dict(m) for m in sample.prompt]}
    if sample.answer is not None:
        row["answer"] = sample.answer
    if sample.tests is not None:
        row["tests"] = dict(sample.tests)
    return row | {k: v for k, v in sample.meta.items() if k not in row}


def opening_messages(value: Any) -> tuple[Message, ...]:
    """`reset`'s return as opening messages: None -> none, text -> one user message (appended
    to the prompt's last user turn, as TRL does), messages as they are."""
    if value is None:
        return ()
    if isinstance(value, str):
        return ({"role": "user", "content": value},)
    if isinstance(value, Mapping):
        value = [value]
    msgs = tuple(dict(m) for m in value)
    if not all(isinstance(m.get("role"), str) and "content" in m for m in msgs):
        raise TypeError(f"reset returned {value!r:.80}: give text, None, or role/content "
                        "messages")
    return msgs


def reward_of(obj: Any) -> Any:
    """The per-rollout object's reward: `get_reward()`, else `reward()` or `reward`; None when
    it has none."""
    if obj is None:
        return None
    getter = getattr(obj, "get_reward", None)
    if callable(getter):
        return getter()
    value = getattr(obj, "reward", None)
    return value() if callable(value) else value


def check_range(bounds: Sequence[float]) -> tuple[float, float]:
    """`reward_range: [lo, hi]` with lo < hi, both finite; ValueError in one line."""
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"reward_range must be two numbers [lo, hi], got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"reward_range must be finite with lo < hi, got [{lo}, {hi}]")
    return lo, hi


def credit_score(value: Any, reward_range: tuple[float, float] = (0.0, 1.0)) -> Score:
    """An environment's own reward as a verdict: a Score as it is; a bool as correct/wrong
    (credit 1/0); a number mapped from `reward_range` onto credit in [0, 1] (`correct` at 1).
    A number outside the range, or anything else, is an `error` verdict saying so."""
    if isinstance(value, Score):
        return value
    if isinstance(value, bool):
        return Score("correct" if value else "wrong", f"environment reward {value}",
                     reward=float(value))
    lo, hi = reward_range
    try:
        number = float(value)
    except (TypeError, ValueError):
        return Score("error", f"environment reward {value!r:.60} is not a number")
    credit = (number - lo) / (hi - lo)
    if not math.isfinite(credit) or not -1e-9 <= credit <= 1 + 1e-9:
        return Score("error", f"environment reward {number:g} is outside reward_range "
                              f"[{lo:g}, {hi:g}]: set reward_range to the environment's own")
    credit = min(max(credit, 0.0), 1.0)
    return Score("correct" if credit >= 1.0 else "wrong", f"environment reward {number:g}",
                 reward=credit)
