"""The multi-turn contract: what a task's environment answers after each assistant turn.

A task with an environment is played in turns: the environment may open the episode (messages
that complete the prompt, `opening`), the model writes an assistant turn, the environment answers
with an observation (a tool's output, test feedback, a game's next state) or says the episode is
done, and the model goes on. The verdict is the environment's own when it gives one (`verdict`:
a game won, the tests of the last submission, a server's reward), else the task's judge on the
final transcript. An `Environment` keeps everything of one rollout in the state `start` makes
(`close` releases it: an interpreter session, a server's episode): it knows no engine, no
tokenizer and no trainer. How tool calls are written and observations rendered is a
`ToolFormat`'s business (envs/tool_format.py); the turn rule every loop follows is envs/turns.py;
turning observations into tokens is the generator's (rollout/). This module holds the shapes,
the run's `EnvContext` and the environment registry only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scalerl.envs.base import Message, Sample, Score
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.sandbox.registry import Registry

# ToolStatus, TOOL_STATUSES, SessionFailed and ToolOutcome are defined in the sandbox layer (the
# tool session returns them; sandbox < envs) and are part of this contract: import them from here.
from scalerl.sandbox.session_types import TOOL_STATUSES as TOOL_STATUSES
from scalerl.sandbox.session_types import SessionFailed as SessionFailed
from scalerl.sandbox.session_types import ToolOutcome as ToolOutcome
from scalerl.sandbox.session_types import ToolStatus as ToolStatus


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote in an assistant turn: a tool's name and its JSON arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def code(self) -> str:
        """The `python` tool's program (its `code` argument; "" for other tools)."""
        code = self.arguments.get("code", "")
        return code if isinstance(code, str) else ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one assistant turn."""

    done: bool
    """The episode is over (the model gave a final answer, the tests pass, no call was made,
    the server said done)."""
    messages: tuple[Message, ...] = ()
    """The observation as chat messages (role `tool` for tool output, `user` for feedback);
    empty when done."""
    calls: tuple[ToolCall, ...] = ()
    outcomes: tuple[ToolOutcome, ...] = ()
    """One per call, in order."""
    reward: float | None = None
    """The environment's own reward for this step (an OpenEnv server's), recorded with the
    turn; the verdict is still `Environment.verdict`'s or the judge's."""


@dataclass(frozen=True)
class Turn:
    """One turn of a rollout, as recorded in `Rollout.turns`."""

    role: str
    """`assistant` (sampled by the policy), `tool` or `user` (written by the environment)."""
    text: str
    start: int
    end: int
    """Its tokens are `token_ids[start:end]` of the rollout's completion."""
    trained: bool
    """Sampled by the policy (carries logprobs, in the loss); environment tokens are not."""

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text, "start": self.start, "end": self.end,
                "trained": self.trained}


class Session(Protocol):
    """A persistent sandboxed interpreter (sandbox/session.py `PythonSession`)."""

    def run(self, code: str) -> ToolOutcome: ...

    def close(self) -> None: ...


class SessionSource(Protocol):
    """Where a rollout gets a fresh session (sandbox/session.py `LazySessions`, `SessionPool`):
    `acquire` raises SessionFailed when no sandbox can start."""

    def acquire(self) -> Session: ...


@dataclass(frozen=True)
class EnvContext:
    """What an environment may use besides the transcript, built once per run
    (envs/context.py `run_context`): the tool-call convention, the grading settings, the
    source of sandboxed interpreter sessions. An environment never builds its own."""

    tool_format: Any = None
    """How calls are parsed from an assistant turn and observations written (envs/tool_format.py
    `ToolFormat`, which imports this module; None: the run has none)."""
    grading: Grading = DEFAULT_GRADING
    """The run's sandbox and verifier settings (an environment that runs tests reads them)."""
    sessions: SessionSource | None = None
    """Sandboxed Python sessions for the `python` tool; None when the run has no sandbox."""


class Environment(abc.ABC):
    """A task's multi-turn environment. Subclasses define `step`; `start`/`close` when they hold
    something per rollout; `opening` when the episode's first messages are theirs; `verdict`
    when they judge the episode themselves. Instances are shared by every rollout of the task
    and keep per-rollout data in the state only (rollouts run concurrently)."""

    name: str = ""
    max_turns: int = 4
    """Assistant turns at most; a rollout that uses them all without finishing is `truncated`."""
    max_observation_chars: int = 2000
    """Each observation's text is cut to this many characters (the cut is said in the text)."""

    def start(self, sample: Sample, context: EnvContext) -> Any:
        """The per-rollout state (default: a dict)."""
        return {}

    def opening(self, state: Any) -> tuple[Message, ...]:
        """Messages that complete the prompt before the first assistant turn (a `user` turn the
        environment writes: OpenEnv's first observation, a TRL class's `reset` text); rendered
        with the prompt by the chat template. Default: none."""
        return ()

    def preflight(self) -> str | None:
        """None when this environment can work here, else one line saying what is missing and
        the fix (a server that does not answer); `Task.preflight` asks it before any run."""
        return None

    def tool_schemas(self, state: Any = None) -> list[dict[str, Any]]:
        """JSON schemas of the tools the model may call (`apply_chat_template(tools=...)`);
        default: none."""
        return []

    @abc.abstractmethod
    def step(self, sample: Sample, transcript: Sequence[Message], state: Any) -> Reply:
        """The answer to the transcript's last message (an assistant turn). May block (a tool
        call runs in the sandbox); the generator calls it off its event loop. Raises
        `SessionFailed` only when the sandbox itself fails."""

    def verdict(self, sample: Sample, state: Any, completion: str) -> Score | None:
        """The environment's own verdict on the finished episode (before `close`), or None to
        leave it to the task's judge (the default). A graded one carries `Score.reward`."""
        return None

    def close(self, state: Any) -> None:  # noqa: B027 - optional hook
        """Release what the state holds (kill its session); called once the rollout ends, also
        when it ends in an error or is cancelled."""


EnvironmentFactory = Callable[..., Environment]
ENVIRONMENTS: Registry[EnvironmentFactory] = Registry("environment")
"""Name -> Environment class (or factory taking a spec's keyword options)."""


def register_environment(name: str) -> Callable[[EnvironmentFactory], EnvironmentFactory]:
    """Decorator: register an Environment class (or factory taking the spec's keyword options)."""
    return ENVIRONMENTS.decorator(name)


def environment_factory(name: str) -> EnvironmentFactory:
    """The registered environment `name`; KeyError naming the registered ones."""
    return ENVIRONMENTS.get(name)
