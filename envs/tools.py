"""Tools as typed Python callables: their schemas, argument checks and guarded calls.

A tool is a callable with type hints and a Google-style docstring: its name, description and
JSON-schema parameters are read from them by transformers' `get_json_schema` (the schema chat
templates take in `apply_chat_template(tools=...)`), so writing the function is registering the
tool. `tool(fn)` makes one (`Tool`), `load_tool("python")` is the built-in sandboxed interpreter
and `load_tool("mypkg.tools:lookup")` imports a user's function; `method_tools(obj)` are the
public methods of a per-rollout object (a stateful tool class, a TRL-style environment).

A user's function is the user's trusted code, but its arguments are model-written, so
`call_tool` checks them against the schema first (with jsonschema; unknown arguments refused, a
bad call is an `error` outcome naming the parameters), runs the function off the caller's thread
with a per-call time limit (a call past it is a `timeout` outcome; Python cannot stop a thread,
so the call runs on, its result dropped), and cuts its output to the observation cap. The built-in
`python` tool has no function: it runs in the rollout's sandboxed session (envs/tool_env.py).
Nothing here parses model text or renders tokens.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.environment import ToolOutcome

PYTHON_TOOL = "python"
PYTHON_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "the Python code to run"}},
    "required": ["code"],
}
PYTHON_DESCRIPTION = ("Run Python code in a persistent session (variables survive between calls) "
                      "and return what it prints (stdout and stderr), or the traceback.")
RESERVED = frozenset({"start", "step", "close", "opening", "verdict", "tool_schemas", "reset",
                      "spawn", "probe", "preflight", "get_reward", "reward", "cleanup", "done"})
"""Method names never offered as tools (the environment's own API and TRL's)."""
MIN_OBSERVATION_CHARS = 64
"""The smallest observation cap accepted (the cut note alone takes ~40 characters)."""
TOOL_THREADS = 64
"""Threads user tool calls run on, process-wide (a call stuck past its limit keeps one)."""


class ToolError(ValueError):
    """A tool that cannot be made (no type hints, no docstring, not importable): one line."""


@dataclass(frozen=True)
class Tool:
    """One tool the model may call: name, description, JSON-schema parameters, and the function
    that runs it (None: the sandboxed `python` interpreter)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] | None = field(default=None, compare=False)

    def schema(self) -> dict[str, Any]:
        """The OpenAI/Hermes function schema chat templates render."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}

    def problem(self, arguments: Mapping[str, Any]) -> str | None:
        """None when `arguments` fit the schema, else one line saying what is wrong and what
        the parameters are."""
        import jsonschema

        validator = jsonschema.Draft202012Validator(dict(self.parameters))
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        if not errors:
            return None
        error = errors[0]
        where = "/".join(str(p) for p in error.path)
        return (f"tool {self.name!r}: bad arguments: {(where + ': ') if where else ''}"
                f"{error.message}; parameters: {describe_parameters(self.parameters)}")


def describe_parameters(parameters: Mapping[str, Any]) -> str:
    """`key (string, required), limit (integer)`: what a model needs to write a call."""
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    parts = [f"{name} ({spec.get('type', 'any')}{', required' if name in required else ''})"
             for name, spec in props.items()]
    return ", ".join(parts) or "none"


PYTHON = Tool(PYTHON_TOOL, PYTHON_DESCRIPTION, PYTHON_PARAMETERS)
"""The built-in sandboxed interpreter (`tools: [python]`)."""


def tool(fn: Callable[..., Any], name: str | None = None) -> Tool:
    """The tool a typed, documented callable (function or bound method) makes; ToolError naming
    it when its hints or docstring cannot be read."""
    from transformers.utils import get_json_schema

    if isinstance(fn, Tool):
        return fn
    label = getattr(fn, "__qualname__", None) or type(fn).__name__
    if inspect.iscoroutinefunction(fn):
        raise ToolError(f"tool {label}: async functions are not supported; write a plain def")
    try:
        schema = get_json_schema(fn)["function"]
    except Exception as exc:  # noqa: BLE001 - transformers raises several types
        raise ToolError(f"tool {label}: {' '.join(str(exc).split())} (a tool needs type hints "
                        "and a Google-style docstring with an Args: section)") from None
    parameters = dict(schema.get("parameters") or {"type": "object", "properties": {}})
    if not _takes_kwargs(fn):
        parameters["additionalProperties"] = False
    return Tool(name or schema["name"], schema.get("description", ""), parameters, fn)


def _takes_kwargs(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def load_tool(ref: str | Callable[..., Any] | Tool) -> Tool:
    """`python` (the sandboxed interpreter), `package.module:function`, a callable or a Tool;
    ToolError in one line when the reference cannot be imported or made a tool."""
    if isinstance(ref, Tool):
        return ref
    if callable(ref):
        return tool(ref)
    if ref == PYTHON_TOOL:
        return PYTHON
    return tool(import_object(ref, "tool"))


def import_object(ref: str, what: str) -> Any:
    """The object `package.module:attribute` names; ToolError in one line otherwise."""
    module_name, sep, attr = str(ref).partition(":")
    if not sep or not module_name or not attr:
        raise ToolError(f"{what} {ref!r}: write it as package.module:name (or a built-in: "
                        f"{PYTHON_TOOL})")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ToolError(f"{what} {ref!r}: cannot import it ({type(exc).__name__}: "
                        f"{exc})") from None
    return obj


def method_tools(obj: Any, exclude: Sequence[str] = ()) -> tuple[Tool, ...]:
    """The public methods of `obj` defined by its class (not by the scalerl base classes it
    may extend), as tools bound to `obj`, in definition order."""
    from scalerl.envs.environment import Environment

    base_names = {n for base in (Environment, *_scalerl_bases(type(obj))) for n in dir(base)}
    names = []
    for klass in reversed(type(obj).__mro__):
        if klass is object or klass.__module__.startswith("scalerl."):
            continue
        names += [n for n, v in vars(klass).items() if inspect.isfunction(v) and n not in names]
    chosen = [n for n in names if not n.startswith("_") and n not in RESERVED
              and n not in exclude and n not in base_names]
    return tuple(tool(getattr(obj, n)) for n in chosen)


def _scalerl_bases(cls: type) -> list[type]:
    return [k for k in cls.__mro__ if k.__module__.startswith("scalerl.")]


_EXECUTOR: concurrent.futures.ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = concurrent.futures.ThreadPoolExecutor(TOOL_THREADS,
                                                              thread_name_prefix="user-tool")
        return _EXECUTOR


def call_tool(t: Tool, arguments: Mapping[str, Any], timeout_s: float,
              max_chars: int) -> ToolOutcome:
    """Run a function tool on model-written `arguments` (see the module docstring). Never
    raises: bad arguments, an exception and the time limit are outcomes the model sees."""
    if t.fn is None:
        raise ValueError(f"tool {t.name!r} has no function (the sandboxed python tool runs in "
                         "a session)")
    problem = t.problem(arguments)
    if problem is not None:
        return outcome("error", problem, 0.0, max_chars)
    start = time.perf_counter()
    future = _executor().submit(t.fn, **dict(arguments))
    try:
        value = future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return outcome("timeout", f"tool {t.name!r} timed out after {timeout_s:g} s", timeout_s,
                       max_chars)
    except Exception as exc:  # noqa: BLE001 - the tool's failure is the model's observation
        return outcome("error", f"{type(exc).__name__}: {exc}", time.perf_counter() - start,
                       max_chars)
    return outcome("ok", render_result(value), time.perf_counter() - start, max_chars)


def render_result(value: Any) -> str:
    """A tool's return value as the text the model reads: strings as they are, JSON for what
    JSON can write, else `str`."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def outcome(status: str, text: str, latency_s: float, max_chars: int) -> ToolOutcome:
    cut, was_cut = cut_observation(text, max_chars)
    return ToolOutcome(status, cut, latency_s, truncated=was_cut)  # type: ignore[arg-type]


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
