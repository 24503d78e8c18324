"""The OpenEnv wire protocol (openenv-core 0.3), client side: one episode per WebSocket session.

An OpenEnv server (openenv-core's `HTTPEnvServer`, openenv/core/env_server/http_server.py) makes
a fresh environment for every HTTP `/reset` and `/step` request and closes it after, so no
episode survives between HTTP calls. An episode is therefore one WebSocket connection to `/ws`,
which the server backs with its own environment instance (a session) until the connection
closes: `{"type": "reset", "data": {reset kwargs}}` and `{"type": "step", "data": {action
fields}}` are each answered by `{"type": "observation", "data": {"observation": {...}, "reward":
r, "done": d}}` or `{"type": "error", "data": {"message": ..., "code": ...}}`, and `{"type":
"close"}` ends the session. A server already holding `max_concurrent_envs` sessions answers a new
connection with the code `CAPACITY_REACHED` (`Refused`); an action that does not fit the server's
Action model with `VALIDATION_ERROR` (`ActionRejected`, the session goes on). `GET /health` and
`GET /schema` (the Action's, Observation's and State's JSON schemas) are plain HTTP;
`read_action_spec` reads from the Action's schema how a turn becomes an Action.

Every network call has a time limit; whatever fails raises `OpenEnvError` naming the server.
Not here: MCP (`/mcp`, `{"type": "mcp"}`), HTTP episodes, Docker or Hugging Face Space providers,
retries (envs/adapters/openenv.py decides what to retry).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import truncate

CONNECT_TIMEOUT_S = 10.0
"""The most a WebSocket handshake or an HTTP request may take to connect."""
MAX_MESSAGE_BYTES = 100 * 2**20
"""The largest message read from a server (openenv-core's own client allows 100 MB)."""
SCHEMES = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
HIDDEN_ACTION_FIELDS = frozenset({"metadata"})
"""Fields every OpenEnv Action has that the model never writes."""


class OpenEnvError(RuntimeError):
    """An OpenEnv server is unreachable, failed, or answered something that is not the protocol."""


class Refused(OpenEnvError):
    """The server refused a new session (`CAPACITY_REACHED`: all its sessions are taken)."""


class ActionRejected(OpenEnvError):
    """The server rejected an action that does not fit its Action model (`VALIDATION_ERROR`);
    the session is still open."""


@dataclass(frozen=True)
class ActionSpec:
    """How an assistant turn becomes the server's Action (`read_action_spec`)."""

    mode: str
    """`text` (the turn's answer is one string field) or `tool` (a call's arguments are the
    Action's fields)."""
    text_field: str | None
    tool: dict[str, Any] | None
    """The tool's JSON schema (`tool` mode): the Action's fields as its parameters."""


@dataclass(frozen=True)
class StepResult:
    """One observation: what `reset` or `step` returned."""

    observation: Mapping[str, Any]
    """The Observation's own fields (openenv-core leaves out `reward`, `done` and `metadata`)."""
    reward: float | bool | None
    done: bool


def check_url(url: Any) -> str:
    """An OpenEnv server's base URL (http, https, ws or wss, with a host), without a trailing
    slash; ValueError in one line."""
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in SCHEMES or not parts.hostname:
        raise ValueError(f"openenv: a server is a URL like http://host:8000, got {url!r:.80}")
    return url.rstrip("/")


def http_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit(parts._replace(scheme=scheme))


def ws_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(scheme=SCHEMES[parts.scheme],
                                                  path=parts.path.rstrip("/") + "/ws"))


def is_loopback(url: str) -> bool:
    """The server is on this machine (no proxy is used for it, as openenv-core's client does)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def get_json(url: str, path: str, timeout_s: float) -> Any:
    """`GET url+path` as JSON; OpenEnvError naming the URL and what failed."""
    where = http_url(url) + path
    handlers = [urllib.request.ProxyHandler({})] if is_loopback(url) else []
    try:
        with urllib.request.build_opener(*handlers).open(where, timeout=timeout_s) as resp:
            body = resp.read(MAX_MESSAGE_BYTES)
    except urllib.error.HTTPError as exc:
        raise OpenEnvError(f"{where} answered HTTP {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad URL
        raise OpenEnvError(f"{where} did not answer: {exc}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise OpenEnvError(f"{where} answered something that is not JSON: "
                           f"{body[:60]!r}") from None


class Session:
    """One episode on one server: a WebSocket connection (`open`), its replies within
    `timeout_s` each, `close` (idempotent, never raises). Not for two threads at once, except
    `close`, which may run while another thread waits on a reply (it then raises)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url, self.timeout_s = url, timeout_s
        self._ws: Any = None
        self._stack = contextlib.ExitStack()

    def open(self) -> Session:
        try:
            from websockets.sync.client import connect
        except ImportError:
            raise OpenEnvError("the OpenEnv adapter needs the `websockets` package: "
                               "pip install websockets") from None
        try:  # entered as a context manager, the only way websockets 17 keeps undeprecated
            self._ws = self._stack.enter_context(connect(
                ws_url(self.url), open_timeout=min(CONNECT_TIMEOUT_S, self.timeout_s),
                close_timeout=2, max_size=MAX_MESSAGE_BYTES,
                proxy=None if is_loopback(self.url) else True))
        except Exception as exc:  # refused, timed out, not a WebSocket endpoint
            raise OpenEnvError(f"OpenEnv server {self.url}: cannot open a session at "
                               f"{ws_url(self.url)}: {type(exc).__name__}: {exc}") from None
        return self

    def reset(self, data: Mapping[str, Any]) -> StepResult:
        return self._call("reset", {"type": "reset", "data": dict(data)})

    def step(self, action: Mapping[str, Any]) -> StepResult:
        return self._call("step", {"type": "step", "data": dict(action)})

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(Exception):  # the server may be gone: best effort
            ws.send(json.dumps({"type": "close"}))
        with contextlib.suppress(Exception):
            self._stack.close()

    def _call(self, what: str, message: Mapping[str, Any]) -> StepResult:
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            raise OpenEnvError(f"OpenEnv server {self.url}: {what} on a closed session")
        try:
            # a refused session is closed at once: its error message is still there to read
            with contextlib.suppress(ConnectionClosed):
                self._ws.send(json.dumps(message, default=str))
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            raise OpenEnvError(f"OpenEnv server {self.url}: no answer to {what} within "
                               f"{self.timeout_s:g} s (timeout_s)") from None
        except ConnectionClosed as exc:
            raise OpenEnvError(f"OpenEnv server {self.url}: the session closed during {what} "
                               f"({exc})") from None
        except Exception as exc:  # the socket itself failed
            raise OpenEnvError(f"OpenEnv server {self.url}: {what} failed: "
                               f"{type(exc).__name__}: {exc}") from None
        return parse_reply(self.url, what, raw)


def parse_reply(url: str, what: str, raw: Any) -> StepResult:
    """A server's answer to reset or step; the error replies as their exceptions, anything
    that is not the protocol as OpenEnvError saying so."""
    garbage = f"OpenEnv server {url}: its answer to {what} is not the protocol"
    try:
        reply = json.loads(raw)
    except (TypeError, ValueError):
        raise OpenEnvError(f"{garbage} (not JSON: {truncate(str(raw), 60)!r})") from None
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, dict):
        raise OpenEnvError(f"{garbage} (no data object: {truncate(str(raw), 80)})")
    if reply.get("type") == "error":
        raise error_of(url, what, data)
    observation, reward, done = data.get("observation"), data.get("reward"), data.get("done")
    if reply.get("type") != "observation" or not isinstance(observation, dict):
        raise OpenEnvError(f"{garbage} (expected an observation: {truncate(str(raw), 80)})")
    if not isinstance(done, bool) or not (reward is None or isinstance(reward, (int, float))):
        raise OpenEnvError(f"{garbage} (done must be true/false and reward a number or null, "
                           f"got done={done!r:.20}, reward={reward!r:.20})")
    return StepResult(observation, reward, done)


def error_of(url: str, what: str, data: Mapping[str, Any]) -> OpenEnvError:
    code, message = data.get("code", "UNKNOWN"), " ".join(str(data.get("message", "")).split())
    if code == "VALIDATION_ERROR":
        errors = data.get("errors") if isinstance(data.get("errors"), list) else []
        said = "; ".join(f"{'.'.join(map(str, e.get('loc', ()))) or 'action'}: {e.get('msg')}"
                         for e in errors if isinstance(e, dict)) or message
        return ActionRejected(f"the action does not fit the environment's Action: {said}")
    cls = Refused if code == "CAPACITY_REACHED" else OpenEnvError
    return cls(f"OpenEnv server {url}: {what} failed ({code}): {truncate(message, 200)}")


def read_action_spec(schema: Any, url: str, *, action: str, action_field: str | None,
                     observation_field: str | None, tool_name: str) -> ActionSpec:
    """The turn -> Action mapping the options ask for, from `GET /schema` (module docstring of
    envs/adapters/openenv.py); OpenEnvError saying why the schema does not fit them."""
    act = schema.get("action") if isinstance(schema, dict) else None
    observation = schema.get("observation") if isinstance(schema, dict) else None
    if not isinstance(act, dict) or not isinstance(act.get("properties"), dict):
        raise OpenEnvError(f"{url}/schema has no action schema with properties")
    shown = (observation or {}).get("properties") or {}
    if observation_field is not None and observation_field not in shown:
        raise OpenEnvError(f"observation_field {observation_field!r} is not a field of its "
                           f"Observation ({', '.join(shown) or 'none'})")
    props = {k: v for k, v in act["properties"].items() if k not in HIDDEN_ACTION_FIELDS}
    required = [r for r in act.get("required", []) if r in props]
    strings = [k for k, v in props.items() if _is_string(v)]
    if action_field is not None:
        if action_field not in strings:
            raise OpenEnvError(f"action_field {action_field!r} is not a string field of its "
                               f"Action (string fields: {', '.join(strings) or 'none'})")
        strings = [action_field]
    others = [r for r in required if r not in strings[:1]]
    if action != "tool" and len(strings) == 1 and not others:
        return ActionSpec("text", strings[0], None)
    if action == "text":
        raise OpenEnvError(f"action text needs an Action with one string field and no other "
                           f"required one; its fields: {', '.join(props) or 'none'} "
                           f"(required: {', '.join(required) or 'none'}): use action tool")
    params = {"type": "object", "properties": props, "required": required}
    if "$defs" in act:
        params["$defs"] = act["$defs"]
    about = act.get("description") or f"Act in the {act.get('title', 'environment')}"
    return ActionSpec("tool", None, {"type": "function", "function": {
        "name": tool_name, "description": " ".join(str(about).split()), "parameters": params}})


def _is_string(prop: Any) -> bool:
    if not isinstance(prop, dict):
        return False
    return prop.get("type") == "string" or any(
        isinstance(s, dict) and s.get("type") == "string" for s in prop.get("anyOf", ()))
