"""Tool-call conventions: how a model writes a tool call and how it is answered.

Two formats, in a registry (`tool_format(name)`; `choose_tool_format` picks one for a tokenizer):
- `plain` (base models, as ToRA and Qwen2.5-Math's tool-integrated reasoning write it): the model
  writes a fenced ```python block, then ```output, where its turn stops (a stop string the sampled
  text keeps); the output is appended as raw text closing that fenced block, and the model goes on
  in the same assistant message, with no chat template (a `user` message, test feedback, is a new
  turn rendered by the template).
- `chat` (Qwen3 / Hermes): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` in
  the assistant text, any tool and any JSON arguments (as vLLM's Hermes parser reads them); each
  answer is a role `tool` message rendered by the tokenizer's chat template (`<tool_response>`),
  the environment's tool schemas passed as `apply_chat_template(tools=...)`.
A call whose syntax is broken (bad JSON, no name, arguments that are not an object) is parsed into
a `MalformedCall` whose `error` tells the model what is valid; whether the tool exists and its
arguments fit its schema is the environment's check (envs/tools.py), answered the same way.
`delta_text` gives the exact text to append after a turn's last sampled token, computed from the
template as a suffix of a fixed dummy conversation (the real conversation is never re-rendered).
This module runs no code and tokenizes nothing itself; `plain` writes only the `python` tool.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Message
from scalerl.envs.environment import ToolCall, ToolOutcome
from scalerl.sandbox.registry import Registry

PYTHON_TOOL = "python"
PYTHON_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": PYTHON_TOOL,
        "description": ("Run Python code in a persistent session (variables survive between "
                        "calls) and return what it prints (stdout and stderr), or the traceback."),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the Python code to run"}},
            "required": ["code"],
        },
    },
}
TOOL_FORMAT_SETTINGS: tuple[str, ...] = ("auto", "chat", "plain")
"""The `tool_format` setting's values: `auto` chooses per tokenizer (`choose_tool_format`)."""
_MARK = "SCALERLDELTAMARK"
"""The dummy assistant content whose end locates the delta in a rendered dummy conversation."""


@dataclass(frozen=True)
class MalformedCall(ToolCall):
    """A call the model tried to write but got wrong: answered with `error`, never run."""

    error: str = ""
    """What was wrong and what is valid (the observation the model sees)."""
    raw: str = ""
    """The text the model wrote for the call."""


class ToolFormat(abc.ABC):
    """One convention for writing tool calls and their answers (see the module docstring)."""

    name: str = ""
    stop: tuple[str, ...] = ()
    """Stop strings that end an assistant turn besides EOS; the sampled text keeps them."""
    tool_names: tuple[str, ...] | None = None
    """The only tools this convention can write (None: any)."""

    def template_tools(self, schemas: Sequence[dict]) -> list[dict] | None:
        """What the prompt passes as `apply_chat_template(tools=...)` for an environment with
        these tool schemas (None: the convention does not show them through the template)."""
        return None

    @abc.abstractmethod
    def parse(self, text: str) -> list[ToolCall]:
        """The calls in one assistant turn's text, in order (MalformedCall for broken ones)."""

    @abc.abstractmethod
    def observation(self, calls: Sequence[ToolCall],
                    outcomes: Sequence[ToolOutcome]) -> tuple[Message, ...]:
        """The messages answering `calls` (one outcome per call, in order)."""

    @abc.abstractmethod
    def delta_text(self, tokenizer: Any, messages: Sequence[Message], last_turn_text: str,
                   template_kwargs: Mapping[str, Any] | None = None,
                   tools: Sequence[dict] = ()) -> str:
        """The exact text to append after an assistant turn's last sampled token so that the
        conversation shows `messages` and the next assistant turn is opened. `last_turn_text` is
        the turn's sampled text decoded with its special tokens (so it ends with the EOS text
        when the turn stopped at EOS, or with the stop string); `template_kwargs` are the extra
        arguments the prompt was rendered with (e.g. `enable_thinking`); `tools` the
        environment's schemas the prompt was rendered with."""


# --- plain: fenced python / output blocks --------------------------------------------------------
_FENCED_PYTHON = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.DOTALL)
_OUTPUT_OPEN = "```output"


class PlainFormat(ToolFormat):
    """```python blocks answered by ```output blocks, inside one assistant message.

    A turn asks for execution by ending with ```output (the stop string): its ```python blocks
    (those after the last answered output block) are the calls. A turn that ends otherwise (EOS)
    is final and its code is not run."""

    name = "plain"
    stop = (_OUTPUT_OPEN,)
    tool_names = (PYTHON_TOOL,)

    def parse(self, text: str) -> list[ToolCall]:
        body = text.rstrip()
        if not body.endswith(_OUTPUT_OPEN):
            return []
        body = body[: -len(_OUTPUT_OPEN)]
        answered = body.rfind(_OUTPUT_OPEN)  # blocks before an answered output block ran already
        if answered >= 0:
            close = body.find("```", answered + len(_OUTPUT_OPEN))
            body = body[close + 3:] if close >= 0 else ""
        codes = _FENCED_PYTHON.findall(body + "```")  # ```output may close the last block itself
        calls: list[ToolCall] = [python_call(c) for c in codes if c.strip()]
        if not calls:
            return [MalformedCall(PYTHON_TOOL, {}, raw=body, error=(
                "no code to run: write the code in a ```python block, close it with ```, "
                "then write ```output to see what it prints"))]
        return calls

    def observation(self, calls: Sequence[ToolCall],
                    outcomes: Sequence[ToolOutcome]) -> tuple[Message, ...]:
        _check_pairs(calls, outcomes)
        text = "\n".join(o.output.rstrip("\n") for o in outcomes)
        return ({"role": "tool", "content": text},)

    def delta_text(self, tokenizer: Any, messages: Sequence[Message], last_turn_text: str,
                   template_kwargs: Mapping[str, Any] | None = None,
                   tools: Sequence[dict] = ()) -> str:
        """Tool output: raw text closing the output block. Other messages (a `user` turn of test
        feedback) are a new turn, rendered by the chat template as `chat` does."""
        if messages and any(m.get("role") != "tool" for m in messages):
            return template_delta(tokenizer, messages, last_turn_text, None, template_kwargs)
        if not last_turn_text.endswith(_OUTPUT_OPEN):
            raise ValueError("plain tool format: an observation follows only a turn that ends "
                             f"with its stop string {_OUTPUT_OPEN!r}; this one ends with "
                             f"{last_turn_text[-30:]!r}")
        if not messages:
            raise ValueError("plain tool format: delta_text needs at least one message")
        output = "\n".join(str(m["content"]).rstrip("\n") for m in messages)
        return "\n" + output + "\n```\n"


# --- chat: Qwen3 / Hermes <tool_call> ------------------------------------------------------------
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CALL_SHAPE = '<tool_call>\n{"name": "<tool>", "arguments": {...}}\n</tool_call>'


class ChatFormat(ToolFormat):
    """Hermes-style `<tool_call>` JSON in the assistant text, answered by role `tool` messages
    that the tokenizer's chat template renders (Qwen3: `<tool_response>` in a user turn)."""

    name = "chat"
    stop = ()

    def template_tools(self, schemas: Sequence[dict]) -> list[dict] | None:
        return list(schemas)

    def parse(self, text: str) -> list[ToolCall]:
        return [_chat_call(m.group(1), closed=m.group(0).endswith("</tool_call>"))
                for m in _TOOL_CALL.finditer(text)]

    def observation(self, calls: Sequence[ToolCall],
                    outcomes: Sequence[ToolOutcome]) -> tuple[Message, ...]:
        _check_pairs(calls, outcomes)
        return tuple({"role": "tool", "content": o.output} for o in outcomes)

    def delta_text(self, tokenizer: Any, messages: Sequence[Message], last_turn_text: str,
                   template_kwargs: Mapping[str, Any] | None = None,
                   tools: Sequence[dict] = ()) -> str:
        return template_delta(tokenizer, messages, last_turn_text, list(tools) or None,
                              template_kwargs)


def template_delta(tokenizer: Any, messages: Sequence[Message], last_turn_text: str,
                   tools: list[dict] | None, template_kwargs: Mapping[str, Any] | None) -> str:
    """The text the chat template puts after an assistant message's content when `messages`
    follow it and a generation prompt opens the next turn, less the end-of-turn token the model
    already sampled: rendered on a fixed dummy conversation (system, user, assistant), never on
    the real one. ValueError when the template does not show the content or the messages."""
    if not messages:
        raise ValueError("tool format: delta_text needs at least one message")
    dummy = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
             {"role": "assistant", "content": _MARK}]
    rendered = tokenizer.apply_chat_template(
        dummy + [dict(m) for m in messages], tools=tools, tokenize=False,
        add_generation_prompt=True, **dict(template_kwargs or {}))
    if rendered.count(_MARK) != 1:
        raise ValueError("tool format: this tokenizer's chat template does not render an "
                         "assistant message's content verbatim, so no delta can be taken from it")
    after = rendered[rendered.index(_MARK) + len(_MARK):]
    missing = [m["role"] for m in messages if str(m["content"]) not in after]
    if missing:
        raise ValueError(f"tool format: this tokenizer's chat template does not show "
                         f"{missing[0]!r} messages (tool_format plain writes tool output without "
                         "it)")
    return after[len(_sampled_end(tokenizer, last_turn_text, after)):]


def _sampled_end(tokenizer: Any, last_turn_text: str, after: str) -> str:
    """The end-of-turn token text the model already sampled that the template's text after the
    assistant content starts with ("" when the turn ended without one, e.g. at a length cap)."""
    for token in sorted(_special_texts(tokenizer), key=len, reverse=True):
        if last_turn_text.endswith(token) and after.startswith(token):
            return token
    return ""


def _special_texts(tokenizer: Any) -> set[str]:
    texts = set(getattr(tokenizer, "all_special_tokens", None) or ())
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    texts |= {t.content for t in decoder.values() if getattr(t, "special", False)}
    return {t for t in texts if t}


def _chat_call(body: str, *, closed: bool) -> ToolCall:
    """One `<tool_call>` body as a ToolCall, or a MalformedCall saying what is valid."""
    valid = f"write {_CALL_SHAPE}"
    try:  # an unclosed last call whose JSON is whole is still a call, as vLLM's hermes parser
        obj = json.loads(body, strict=False)  # a raw newline inside a string is common
    except json.JSONDecodeError as exc:
        what = "is not valid JSON" if closed else "is unfinished (no </tool_call>)"
        return MalformedCall("", {}, raw=body, error=f"tool call {what} ({exc.msg} at char "
                                                     f"{exc.pos}): {valid}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return MalformedCall("", {}, raw=body, error=f"tool call has no \"name\": {valid}")
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args, strict=False)
        except json.JSONDecodeError:
            args = None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return MalformedCall(name, {}, raw=body, error=f"tool call {name!r}: \"arguments\" must "
                                                       f"be a JSON object: {valid}")
    return ToolCall(name, args)


def python_call(code: str) -> ToolCall:
    """A call of the `python` tool running `code`."""
    return ToolCall(PYTHON_TOOL, {"code": code})


def _check_pairs(calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> None:
    if len(calls) != len(outcomes) or not calls:
        raise ValueError(f"observation needs one outcome per call and at least one call; got "
                         f"{len(calls)} calls, {len(outcomes)} outcomes")


# --- the registry and the choice -----------------------------------------------------------------
_FORMATS: Registry[ToolFormat] = Registry("tool format")


def register_tool_format(fmt: ToolFormat) -> ToolFormat:
    """Register `fmt` under its name (`auto` is the setting's, not a format's name)."""
    if fmt.name == "auto":
        raise ValueError("tool format name 'auto' is reserved (the setting that chooses one)")
    return _FORMATS.add(fmt.name, fmt)


register_tool_format(PlainFormat())
register_tool_format(ChatFormat())


def tool_format(name: str) -> ToolFormat:
    """The registered format `name`; KeyError naming the known ones."""
    if name not in _FORMATS:
        raise KeyError(f"unknown tool format {name!r}; known: {', '.join(_FORMATS.names())}")
    return _FORMATS[name]


def choose_tool_format(setting: str, tokenizer: Any) -> ToolFormat:
    """`auto`: `chat` when the tokenizer's chat template renders tools in the Qwen3/Hermes
    convention (`<tool_call>` schemas, `<tool_response>` answers), else `plain`; `chat` on a
    template that does not is a ValueError; any other name is looked up."""
    if setting not in TOOL_FORMAT_SETTINGS and setting not in _FORMATS:
        raise ValueError(f"tool format {setting!r} is not one of "
                         f"{', '.join(dict.fromkeys(TOOL_FORMAT_SETTINGS + tuple(_FORMATS)))}")
    if setting == "auto":
        return _FORMATS["chat" if renders_tools(tokenizer) else "plain"]
    if setting == "chat" and not renders_tools(tokenizer):
        raise ValueError("tool format 'chat' needs a chat template that renders tools with "
                         "<tool_call>/<tool_response> (Qwen3, Hermes); this tokenizer's does "
                         "not: use tool_format plain (or auto)")
    return _FORMATS[setting]


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template shows tool schemas and `tool` messages in the
    Qwen3/Hermes convention (a template that refuses a `tool` message renders none)."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    conversation = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
                    {"role": "tool", "content": _MARK}]
    try:
        text = tokenizer.apply_chat_template(conversation, tools=[PYTHON_SCHEMA], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that raises on tools or `tool` renders none
        return False
    return (isinstance(text, str) and "<tool_call>" in text and "<tool_response>" in text
            and _MARK in text and '"python"' in text)

