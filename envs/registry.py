"""The task registry: task names and task-name prefixes, and raw lookups into them.

Lookups here are raw: they see only what has been registered so far and fail with one line listing
the known names. Kinds are envs/kinds.py's; loading built-ins, plugins and task files is
envs/catalog.py's job; this module loads nothing, scores nothing, reads no data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scalerl.envs.kinds import UnknownTaskError

if TYPE_CHECKING:
    from scalerl.envs.task import Task

TaskFactory = Callable[[], "Task"]
PrefixFactory = Callable[[str], "Task"]
_TASKS: dict[str, TaskFactory] = {}
_PREFIXES: dict[str, PrefixFactory] = {}
_PREFIX_HELP: dict[str, str] = {}
_INSTANCES: dict[str, Any] = {}
"""Tasks built so far, by name (each is built once)."""


# --- tasks and prefixes --------------------------------------------------------------------------
def register_task(name: str, *, replace: bool = False) -> Callable:
    """Decorator: register a Task subclass (instantiated with no arguments) or a factory."""

    def deco(factory: TaskFactory) -> TaskFactory:
        add_task(name, factory, replace=replace)
        return factory

    return deco


def add_task(name: str, factory: TaskFactory, *, replace: bool = False) -> None:
    if not name or ":" in name:
        raise ValueError(f"task name {name!r} must be non-empty and contain no ':'")
    if name in _TASKS and not replace:
        raise ValueError(f"task {name!r} is already registered")
    _TASKS[name] = factory
    _INSTANCES.pop(name, None)


def register_task_prefix(prefix: str, *, description: str = "") -> Callable:
    """Decorator: register a factory for every name `prefix:<rest>`, called as factory(rest)."""

    def deco(factory: PrefixFactory) -> PrefixFactory:
        if prefix in _PREFIXES and _PREFIXES[prefix] is not factory:
            raise ValueError(f"task prefix {prefix!r} is already registered")
        _PREFIXES[prefix] = factory
        _PREFIX_HELP[prefix] = description or (factory.__doc__ or "").strip().split("\n")[0]
        return factory

    return deco


def checked_levels(family_name: str, levels: Sequence[str], known: Sequence[str]
                   ) -> tuple[str, ...]:
    """`levels` of a synthetic task family (`arith:add2,mul2`), each one of `known`;
    UnknownTaskError naming the unknown ones (or none given) and the valid ones."""
    unknown = [lv for lv in levels if lv not in known]
    if unknown or not levels:
        raise UnknownTaskError(f"unknown {family_name} level {', '.join(unknown) or '(none)'}; "
                               f"levels: {', '.join(known)}")
    return tuple(levels)


def family(name: str) -> str:
    """The family of a parametric task name (`livecodebench` for `livecodebench:2024-08..2025-02`,
    `arith` for `arith:add2`); a plain name is its own family."""
    return name.split(":", 1)[0]


def factory_of(name: str) -> Callable[..., Any]:
    """The factory that builds task `name` (a prefix's factory for `prefix:<rest>`)."""
    if name in _TASKS:
        return _TASKS[name]
    prefix = family(name) if ":" in name else None
    if prefix in _PREFIXES:
        return _PREFIXES[prefix]
    known = sorted(_TASKS) + [f"{p}:<name>" for p in sorted(_PREFIXES)]
    raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(known)}")


def lookup_task(name: str) -> Any:
    """What the factory of `name` built (once, then cached); a task without a name gets `name`.

    Whether the object is a Task is the caller's check (envs/catalog.py): this module does not
    import the Task class.
    """
    if name in _INSTANCES:
        return _INSTANCES[name]
    factory = factory_of(name)  # UnknownTaskError for an unknown name
    task = factory() if name in _TASKS else factory(name.split(":", 1)[1])  # prefix:<rest>
    if getattr(task, "name", None) == "":
        task.name = name
    _INSTANCES[name] = task
    return task


def task_names() -> list[str]:
    """Names registered so far (prefix families excluded)."""
    return sorted(_TASKS)


def prefixes() -> dict[str, str]:
    """Prefixes registered so far, with their one-line descriptions."""
    return {p: _PREFIX_HELP.get(p, "") for p in sorted(_PREFIXES)}
