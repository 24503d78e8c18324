"""OpenEnv servers as scalerl environments: `environment: {openenv: URL, ...options}`.

Each rollout is one episode in its own server session (a WebSocket connection,
envs/adapters/openenv_client.py): `start` opens it and resets it with the sample's row (`prompt`,
`answer`, `tests`, its meta, and an `episode_id`; the server's `reset` takes the keywords its
signature names); the first observation is the opening `user` message, appended to the prompt;
each assistant turn becomes one `step` (or one per call, below); the step's observation is the
next message, its `reward` the Reply's, its `done` the episode's end. The verdict is the server's
reward, the last step's (`reward: last`) or the episode's sum (`reward: sum`), mapped onto credit
in [0, 1] through `reward_range` (envs/tool_env.py `credit_score`); an episode that ended without
any reward is `no_answer` when the server had not said done (turns ran out), else `error`.

How a turn becomes an Action (`action`, chosen from the server's Action schema, `GET /schema`):
- `text`: the turn's answer (the text after its last `</think>`, stripped) is the Action's one
  string field (`action_field`, default: the only one); its observation is a `user` message;
- `tool`: the model calls the tool `tool_name` (default `act`) in the run's tool format, its
  JSON arguments being the Action's fields (the tool's schema is the Action's); each call is one
  step, answered by a `tool` message; a call the server rejects (`VALIDATION_ERROR`), a malformed
  call or another tool's name is answered with the error, not stepped; a turn with no call ends
  the episode;
- `auto` (default): `text` when the Action has exactly one string field and no other required
  one, else `tool`.
The observation shown is the field `observation_field`, or the observation's only field, or all
its fields as JSON; cut to `max_observation_chars`.

With several URLs each episode goes to the server with the fewest of this process's sessions open
(ties in turn). A server at its session limit is tried again, then the others, for
`session_wait_s`; then the start fails. Every call has a time limit (`timeout_s`). Failures are
loud: a server that is down or answers garbage is `preflight`'s one line, and during a run the
call raises (an `env_error` verdict: excluded from training, counted). Not covered: MCP
environments' own tool listing (their `CallToolAction` is played as any Action), HTTP episodes.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.adapters.base import ADAPTERS
from scalerl.envs.adapters.openenv_client import (
    CONNECT_TIMEOUT_S,
    ActionRejected,
    ActionSpec,
    OpenEnvError,
    Refused,
    Session,
    StepResult,
    check_url,
    get_json,
    read_action_spec,
)
from scalerl.envs.base import Message, Sample, Score
from scalerl.envs.environment import EnvContext, Environment, Reply, ToolCall, ToolOutcome
from scalerl.envs.tool_env import check_range, credit_score, sample_row
from scalerl.envs.tools import check_limits, cut_observation, outcome

ACTION_MODES: tuple[str, ...] = ("auto", "text", "tool")
REWARD_MODES: tuple[str, ...] = ("last", "sum")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_SESSION_WAIT_S = 10.0


@dataclass
class OpenEnvState:
    """One rollout's episode: its server, its session, what the server said so far."""

    url: str
    session: Session
    fmt: Any = None
    """The run's tool format (`tool` mode)."""
    opening: tuple[Message, ...] = ()
    rewards: list[float | bool] = field(default_factory=list)
    steps: int = 0
    done: bool = False
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _number(name: str, value: Any, zero: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (
        value >= 0 if zero else value > 0)
    if not ok:
        raise ValueError(f"openenv: {name} must be a number {'>=' if zero else '>'} 0, "
                         f"got {value!r:.40}")
    return float(value)


def _choice(name: str, value: Any, valid: Sequence[str]) -> str:
    if value not in valid:
        raise ValueError(f"openenv: {name} must be one of {', '.join(valid)}, got {value!r:.40}")
    return value


def _name(name: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"openenv: {name} must be a field name (a string), got {value!r:.40}")
    return value


class OpenEnvEnvironment(Environment):
    """An OpenEnv server's environment, one session per rollout (module docstring)."""

    name = "openenv"

    def __init__(self, urls: str | Sequence[str], *, max_turns: int | None = None,
                 max_observation_chars: int | None = None, action: str = "auto",
                 action_field: str | None = None, tool_name: str = "act",
                 observation_field: str | None = None, reward: str = "last",
                 reward_range: Sequence[float] = (0.0, 1.0),
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 session_wait_s: float = DEFAULT_SESSION_WAIT_S) -> None:
        given = [urls] if isinstance(urls, str) else urls
        if not isinstance(given, (list, tuple)) or not given:
            raise ValueError(f"openenv: give a server URL or a list of them, got {urls!r:.80}")
        self.urls = tuple(dict.fromkeys(check_url(u) for u in given))
        self.max_turns, self.max_observation_chars = check_limits(
            self.max_turns if max_turns is None else max_turns,
            self.max_observation_chars if max_observation_chars is None
            else max_observation_chars)
        self.action = _choice("action", action, ACTION_MODES)
        self.action_field = _name("action_field", action_field)
        if self.action_field is not None and self.action == "tool":
            raise ValueError("openenv: action_field is for action text (the field the text "
                             "goes into); action tool writes every field")
        if not isinstance(tool_name, str) or not tool_name.isidentifier():
            raise ValueError(f"openenv: tool_name must be an identifier, got {tool_name!r:.40}")
        self.tool_name = tool_name
        self.observation_field = _name("observation_field", observation_field)
        self.reward = _choice("reward", reward, REWARD_MODES)
        self.reward_range = check_range(reward_range)
        self.timeout_s = _number("timeout_s", timeout_s)
        self.session_wait_s = _number("session_wait_s", session_wait_s, zero=True)
        self._spec: ActionSpec | None = None
        self._lock = threading.Lock()
        self._open: dict[str, int] = dict.fromkeys(self.urls, 0)
        self._turn = 0

    def __repr__(self) -> str:
        return f"OpenEnvEnvironment({list(self.urls)}, action={self.action!r})"

    # --- what the server's schema decides --------------------------------------------------
    def preflight(self) -> str | None:
        """One line naming the first server that is down, unhealthy or not OpenEnv, or whose
        schema does not fit the options; None when every server answers."""
        for url in self.urls:
            try:
                health = get_json(url, "/health", CONNECT_TIMEOUT_S)
                if not isinstance(health, dict) or health.get("status") != "healthy":
                    raise OpenEnvError(f"{url}/health answered {str(health)[:80]!r}, not "
                                       "{'status': 'healthy'}")
                spec = self._resolve(get_json(url, "/schema", CONNECT_TIMEOUT_S), url)
                Session(url, self.timeout_s).open().close()
            except OpenEnvError as exc:
                said = " ".join(str(exc).split())
                return said if said.startswith("OpenEnv server") else (
                    f"OpenEnv server {url}: {said}")
            with self._lock:
                self._spec = self._spec or spec
        return None

    def action_spec(self) -> ActionSpec:
        """The turn -> Action mapping, from the first server's schema (read once)."""
        with self._lock:
            if self._spec is None:
                url = self.urls[0]
                self._spec = self._resolve(get_json(url, "/schema", self.timeout_s), url)
            return self._spec

    def _resolve(self, schema: Any, url: str) -> ActionSpec:
        return read_action_spec(schema, url, action=self.action, action_field=self.action_field,
                                observation_field=self.observation_field,
                                tool_name=self.tool_name)

    def tool_schemas(self, state: Any = None) -> list[dict[str, Any]]:
        spec = self.action_spec() if self.action != "text" else None
        return [spec.tool] if spec is not None and spec.tool is not None else []

    # --- one episode -----------------------------------------------------------------------
    def start(self, sample: Sample, context: EnvContext) -> OpenEnvState:
        spec = self.action_spec()
        fmt = context.tool_format if spec.mode == "tool" else None
        if spec.mode == "tool":
            names = getattr(fmt, "tool_names", ()) if fmt is not None else ()
            if fmt is None or (names is not None and self.tool_name not in names):
                raise ValueError(f"openenv: action tool needs a tool format that writes any "
                                 f"tool (tool_format chat), not {getattr(fmt, 'name', None)!r}")
        data = sample_row(sample) | {"episode_id": f"{sample.task}/{sample.id}/"
                                                   f"{uuid.uuid4().hex[:12]}"[-255:]}
        state, first = self._open_session(data)
        try:
            if first.done:
                raise OpenEnvError(f"OpenEnv server {state.url}: reset returned done")
            state.fmt = fmt
            state.opening = ({"role": "user", "content": self._shown(first, state.url)},)
        except BaseException:
            self.close(state)
            raise
        return state

    def _open_session(self, data: Mapping[str, Any]) -> tuple[OpenEnvState, StepResult]:
        """A reset session on the least-loaded server that takes one; Refused when all are
        full for `session_wait_s`."""
        deadline, pause = time.monotonic() + self.session_wait_s, 0.05
        while True:
            refused: list[str] = []
            for _ in self.urls:
                url = self._pick(exclude=refused)
                session = Session(url, self.timeout_s)
                try:
                    first = session.open().reset(data)
                except BaseException as exc:
                    session.close()
                    self._release(url)
                    if not isinstance(exc, Refused):
                        raise
                    refused.append(url)
                    continue
                return OpenEnvState(url, session), first
            if time.monotonic() + pause > deadline:
                raise Refused(f"every OpenEnv server refused a new session for "
                              f"{self.session_wait_s:g} s (session_wait_s): all their sessions "
                              f"are taken; start them with a larger max_concurrent_envs or list "
                              f"more ({', '.join(self.urls)})")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _pick(self, exclude: Sequence[str]) -> str:
        with self._lock:
            n = len(self.urls)
            order = [self.urls[(self._turn + i) % n] for i in range(n)]
            url = min((u for u in order if u not in exclude), key=self._open.__getitem__)
            self._turn += 1
            self._open[url] += 1
            return url

    def _release(self, url: str) -> None:
        with self._lock:
            self._open[url] -= 1

    def opening(self, state: OpenEnvState) -> tuple[Message, ...]:
        return state.opening

    def step(self, sample: Sample, transcript: Sequence[Message],
             state: OpenEnvState) -> Reply:
        if not transcript or transcript[-1].get("role") != "assistant":
            raise ValueError("openenv: step needs a transcript ending with an assistant turn")
        if state.done:
            raise OpenEnvError(f"OpenEnv server {state.url}: step after the episode was done")
        text = str(transcript[-1].get("content") or "")
        spec = self.action_spec()
        if spec.mode == "tool":
            return self._tool_turn(text, state)
        try:
            result = self._step(state, {spec.text_field: answer_text(text)})
        except ActionRejected as exc:
            return Reply(done=False, messages=({"role": "user", "content": self._cut(str(exc))},))
        messages = () if result.done else ({"role": "user",
                                            "content": self._shown(result, state.url)},)
        return Reply(done=result.done, messages=messages, reward=_float(result.reward))

    def _tool_turn(self, text: str, state: OpenEnvState) -> Reply:
        """Each call of the turn one step, in order, until the server says done."""
        calls = tuple(state.fmt.parse(text))
        if not calls:
            return Reply(done=True)
        played: list[tuple[ToolCall, ToolOutcome, float | None]] = []
        for call in calls:
            played.append((call, *self._call(call, state)))
            if state.done:
                break
        done_calls, outcomes, rewards = (tuple(column) for column in zip(*played, strict=True))
        got = [r for r in rewards if r is not None]
        reward = (got[-1] if self.reward == "last" else sum(got)) if got else None
        messages = () if state.done else tuple(state.fmt.observation(done_calls, outcomes))
        return Reply(done=state.done, messages=messages, calls=done_calls, outcomes=outcomes,
                     reward=reward)

    def _call(self, call: ToolCall, state: OpenEnvState) -> tuple[ToolOutcome, float | None]:
        """One call's outcome and reward: stepped when it is a well-formed call of the tool,
        else (or when the server rejects the action) answered with the error."""
        t0, cap = time.perf_counter(), self.max_observation_chars
        error = getattr(call, "error", None) or (
            None if call.name == self.tool_name
            else f"unknown tool {call.name!r}; the tool is {self.tool_name!r}")
        if error is None:
            try:
                result = self._step(state, call.arguments)
            except ActionRejected as exc:
                error = str(exc)
            else:
                return (outcome("ok", self._text(result, state.url), time.perf_counter() - t0,
                                cap), _float(result.reward))
        return outcome("error", error, time.perf_counter() - t0, cap), None

    def _step(self, state: OpenEnvState, action: Mapping[str, Any]) -> StepResult:
        result = state.session.step(action)
        state.steps += 1
        state.done = result.done
        if result.reward is not None:
            state.rewards.append(result.reward)
        return result

    def _shown(self, result: StepResult, url: str) -> str:
        return self._cut(self._text(result, url))

    def _text(self, result: StepResult, url: str) -> str:
        """The observation's text: `observation_field`, its only field, or all as JSON."""
        obs = result.observation
        if self.observation_field is not None:
            if self.observation_field not in obs:
                raise OpenEnvError(f"OpenEnv server {url}: its observation has no field "
                                   f"{self.observation_field!r} (observation_field); it has "
                                   f"{', '.join(obs) or 'none'}")
            value = obs[self.observation_field]
        else:
            value = next(iter(obs.values())) if len(obs) == 1 else obs
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    def _cut(self, text: str) -> str:
        return cut_observation(text, self.max_observation_chars)[0]

    def verdict(self, sample: Sample, state: OpenEnvState, completion: str) -> Score:
        if not state.rewards:
            if state.done:
                return Score("error", f"OpenEnv server {state.url} ended the episode without "
                                      f"a reward ({state.steps} steps)")
            return Score("no_answer", f"OpenEnv server {state.url} gave no reward in "
                                      f"{state.steps} steps (the episode was not done)")
        value = (state.rewards[-1] if self.reward == "last"
                 else sum(float(r) for r in state.rewards))
        return credit_score(value, self.reward_range)

    def close(self, state: OpenEnvState) -> None:
        with state.lock:
            if state.closed:
                return
            state.closed = True
        state.session.close()  # never raises
        self._release(state.url)


def answer_text(text: str) -> str:
    """A turn's answer: the text after its last `</think>`, stripped; "" when a `<think>` was
    opened and never closed (the turn ended while thinking)."""
    _, closed, tail = text.rpartition("</think>")
    return "" if "<think>" in (tail if closed else text) else tail.strip()


def _float(value: float | bool | None) -> float | None:
    return None if value is None else float(value)


OPTIONS: tuple[str, ...] = ("max_turns", "max_observation_chars", "action", "action_field",
                            "tool_name", "observation_field", "reward", "reward_range",
                            "timeout_s", "session_wait_s")


@ADAPTERS.register("openenv")
def openenv_environment(urls: str | Sequence[str], **options: Any) -> OpenEnvEnvironment:
    """`environment: {openenv: URL or [URL, ...], ...options}`."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"openenv: unknown option {unknown[0]!r}; valid: {', '.join(OPTIONS)}")
    return OpenEnvEnvironment(urls, **options)
