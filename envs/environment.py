"""The multi-turn contract: what a task's environment answers after each assistant turn.

A task with an environment is played in turns: the model writes an assistant turn, the
environment answers with an observation (a tool's output, or test feedback) or says the episode
is done, and the model goes on; the verdict still comes from the task's judge on the final
transcript. An `Environment` is a pure function of the transcript so far and a per-rollout state
(`start` makes the state, `close` releases what it holds, e.g. its interpreter session): it knows
no engine, no tokenizer and no trainer. How tool calls are written and how observations are
rendered is a `ToolFormat`'s business (envs/tool_format.py); turning observations into tokens is
the generator's (rollout/). This module holds the shapes and the environment registry only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.base import Message, Sample

# ToolStatus, TOOL_STATUSES, SessionFailed and ToolOutcome are defined in the sandbox layer (the
# tool session returns them; sandbox < envs) and are part of this contract: import them from here.
from scalerl.sandbox.session_types import TOOL_STATUSES as TOOL_STATUSES
from scalerl.sandbox.session_types import SessionFailed as SessionFailed
from scalerl.sandbox.session_types import ToolOutcome as ToolOutcome
from scalerl.sandbox.session_types import ToolStatus as ToolStatus


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote in an assistant turn."""

    name: str
    """The tool's name (`python`)."""
    code: str
    """The program to run (the call's `code` argument)."""


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one assistant turn."""

    done: bool
    """The episode is over (the model gave a final answer, the tests pass, no call was made)."""
    messages: tuple[Message, ...] = ()
    """The observation as chat messages (role `tool` for tool output, `user` for feedback);
    empty when done."""
    calls: tuple[ToolCall, ...] = ()
    outcomes: tuple[ToolOutcome, ...] = ()
    """One per call, in order."""


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


@dataclass
class EnvContext:
    """What an environment may use besides the transcript: the run's sandbox settings and a
    source of interpreter sessions (filled by the glue; an environment never builds its own)."""

    sessions: Any = None
    """A session pool (sandbox/session.py `SessionPool`): `acquire()` gives a fresh persistent
    Python session; None when the run has no tools."""
    tool_format: Any = None
    """The run's tool-call convention (envs/tool_format.py `ToolFormat`): how calls are parsed
    from an assistant turn and how observations are written."""
    options: dict[str, Any] = field(default_factory=dict)


class Environment(abc.ABC):
    """A task's multi-turn environment. Subclasses define `step`; `start`/`close` when they hold
    something per rollout (an interpreter session). Instances are shared by every rollout of the
    task and must keep per-rollout data in the state only (rollouts run concurrently)."""

    name: str = ""
    max_turns: int = 4
    """Assistant turns at most; a rollout that uses them all without finishing is `truncated`."""
    max_observation_chars: int = 2000
    """Each observation's text is cut to this many characters (the cut is said in the text)."""

    def start(self, sample: Sample, context: EnvContext) -> Any:
        """The per-rollout state (default: a dict)."""
        return {}

    @abc.abstractmethod
    def step(self, sample: Sample, transcript: Sequence[Message], state: Any) -> Reply:
        """The answer to the transcript's last message (an assistant turn). May block (a tool
        call runs in the sandbox); the generator calls it off its event loop. Raises
        `SessionFailed` only when the sandbox itself fails."""

    def close(self, state: Any) -> None:  # noqa: B027 - optional hook
        """Release what the state holds (kill its session); called once the rollout ends, also
        when it ends in an error or is cancelled."""


EnvironmentFactory = Callable[..., Environment]
_ENVIRONMENTS: dict[str, EnvironmentFactory] = {}


def register_environment(name: str) -> Callable[[EnvironmentFactory], EnvironmentFactory]:
    """Decorator: register an Environment class (or factory taking the spec's keyword options)."""

    def deco(factory: EnvironmentFactory) -> EnvironmentFactory:
        if name in _ENVIRONMENTS:
            raise ValueError(f"environment {name!r} is already registered")
        _ENVIRONMENTS[name] = factory
        return factory

    return deco


def environment_factory(name: str) -> EnvironmentFactory:
    """The registered environment `name`; KeyError naming the registered ones."""
    if name not in _ENVIRONMENTS:
        raise KeyError(f"unknown environment {name!r}; registered: "
                       f"{', '.join(sorted(_ENVIRONMENTS)) or 'none'}")
    return _ENVIRONMENTS[name]
