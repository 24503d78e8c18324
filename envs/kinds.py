"""Task kinds: how a sample of a kind (`math`, `code`, or a user's) is scored, which gold field it
needs, how that gold is read from a data file's row, its system prompt and what its verifier needs
from the machine (`preflight`), so that a data file plus field names is enough to make a task.
Raw lookups only: what has been registered so far, else one line listing the known kinds. No
verifier here (envs/math and envs/code register theirs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Sample, Score
from scalerl.envs.grading import Grading
from scalerl.sandbox.registry import Registry

GoldReader = Callable[[Any, str], Any]
"""reader(raw value, column name) -> gold value; raises ValueError saying what is wrong."""
Preflight = Callable[[Mapping[str, Any], Grading], "str | None"]
"""preflight(verifier options, grading) -> None when the verifier can work on this machine with
the run's settings, else one line saying what is missing and how to fix it. Cheap: it may probe
(a daemon, a binary), never score."""


class UnknownTaskError(KeyError):
    """An unknown task or kind name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Kind:
    """A kind of task: how to score one of its samples, and what a sample of it needs."""

    name: str
    score: Callable[[Sample, str, Mapping[str, Any], Grading], Score]
    """score(sample, completion, options, grading) -> Score; never raises. `grading` (the run's
    sandbox and verifier settings) defaults to this machine's (`DEFAULT_GRADING`)."""
    gold_field: str
    """The Sample field the verifier needs: `answer` or `tests`."""
    system_prompt: str
    """Default system prompt for tasks of this kind."""
    gold_columns: tuple[str, ...] = ()
    """Data-file columns tried, in order, for the gold (empty: the column named `gold_field`)."""
    read_gold: GoldReader | None = None
    """Converts a row's raw gold value (e.g. a MATH solution -> its boxed answer); None: as is."""
    preflight: Preflight | None = None
    """What the verifier needs from this machine (e.g. code: a working sandbox backend); None:
    nothing beyond the Python packages. Train, eval and generate run it before any engine
    starts."""
    options: tuple[str, ...] | None = None
    """The verifier options a task of this kind may set (None: any); `Task.preflight` refuses
    others before anything starts, and `score` (wrapped here) gives them an `error` verdict."""
    option_hint: str = ""
    """Added to the refusal of an unknown option (e.g. where a setting moved to)."""

    def __post_init__(self) -> None:
        if self.options is not None:  # every verdict of this kind refuses unknown options
            object.__setattr__(self, "score", _refusing_unknown_options(self, self.score))

    def options_problem(self, options: Mapping[str, Any]) -> str | None:
        """None when every option is one this kind knows, else one line naming the unknown ones
        and the valid ones."""
        unknown = [] if self.options is None else sorted(set(options) - set(self.options))
        if not unknown:
            return None
        hint = f" ({self.option_hint})" if self.option_hint else ""
        return (f"unknown {self.name} option(s) {', '.join(unknown)}; valid: "
                f"{', '.join(self.options or ())}{hint}")


def _refusing_unknown_options(kind: Kind, score: Callable[..., Score]) -> Callable[..., Score]:
    """`score`, giving an `error` verdict naming them when the options hold one `kind` does
    not know (a task spec's typo; `Task.preflight` refuses it before a run starts)."""
    @functools.wraps(score)
    def checked(sample: Sample, completion: str, options: Mapping[str, Any], *args: Any,
                **kwargs: Any) -> Score:  # args, kwargs: the grading, when given
        problem = kind.options_problem(options)
        return Score("error", problem) if problem is not None else score(
            sample, completion, options, *args, **kwargs)

    return checked


_KINDS: Registry[Kind] = Registry("task kind")


def register_kind(kind: Kind, *, replace: bool = False) -> Kind:
    """Register `kind` under its name; a taken name is refused (sandbox/registry.py's rule)."""
    return _KINDS.add(kind.name, kind, replace=replace)


def lookup_kind(name: str) -> Kind:
    """The kind registered as `name`; UnknownTaskError listing the known kinds otherwise."""
    if name not in _KINDS:
        known = ", ".join(_KINDS.names())
        raise UnknownTaskError(f"unknown task kind {name!r}; known kinds: {known}")
    return _KINDS[name]


def kind_names() -> list[str]:
    return _KINDS.names()
