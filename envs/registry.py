"""The task registry: three ways in (decorator, task spec file, `scalerl.tasks` entry points).

Also the registry of task *kinds* (`math`, `code`, or a user's): a kind knows how to score a
sample of its kind, which gold field it needs and which system prompt it uses, so a data file plus
field names is enough to make a task. Looking up an unknown name fails with one line listing the
known names. This module does no data loading and no scoring itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from scalerl.envs.base import Sample, Score, Task

ENTRY_POINT_GROUP = "scalerl.tasks"
SPEC_PATH_ENV = "SCALERL_TASKS"
"""os.pathsep-separated task files registered at first lookup: YAML/JSON specs, or `.py` files
of `@register_task` classes (imported)."""

# Modules that register the built-in tasks and kinds when imported.
BUILTIN_MODULES: tuple[str, ...] = (
    "scalerl.envs.math",
    "scalerl.envs.math_tasks",
    "scalerl.envs.arith",
    "scalerl.envs.reasoning_gym",
    "scalerl.envs.code_tasks",
)


class UnknownTaskError(KeyError):
    """An unknown task or kind name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Kind:
    """A kind of task: how to score one of its samples, and what a sample of it needs."""

    name: str
    score: Callable[[Sample, str, Mapping[str, Any]], Score]
    """score(sample, completion, options) -> Score; never raises."""
    gold_field: str
    """The Sample field the verifier needs: `answer` or `tests`."""
    system_prompt: str
    """Default system prompt for tasks of this kind."""


TaskFactory = Callable[[], Task]
_TASKS: dict[str, TaskFactory] = {}
_PREFIXES: dict[str, Callable[[str], Task]] = {}
_PREFIX_HELP: dict[str, str] = {}
_KINDS: dict[str, Kind] = {}
_INSTANCES: dict[str, Task] = {}
_loaded = False


def register_kind(kind: Kind) -> Kind:
    _KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> Kind:
    _ensure_loaded()
    if name not in _KINDS:
        known = ", ".join(sorted(_KINDS))
        raise UnknownTaskError(f"unknown task kind {name!r}; known kinds: {known}")
    return _KINDS[name]


def kinds() -> list[str]:
    _ensure_loaded()
    return sorted(_KINDS)


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

    def deco(factory: Callable[[str], Task]) -> Callable[[str], Task]:
        _PREFIXES[prefix] = factory
        _PREFIX_HELP[prefix] = description or (factory.__doc__ or "").strip().split("\n")[0]
        return factory

    return deco


def get_task(name: str) -> Task:
    """The task registered under `name` (built once, then cached)."""
    _ensure_loaded()
    if name in _INSTANCES:
        return _INSTANCES[name]
    if name in _TASKS:
        task = _TASKS[name]()
    elif ":" in name and name.split(":", 1)[0] in _PREFIXES:
        prefix, rest = name.split(":", 1)
        task = _PREFIXES[prefix](rest)
    else:
        known = sorted(_TASKS) + [f"{p}:<name>" for p in sorted(_PREFIXES)]
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(known)}")
    if not task.name:
        task.name = name
    _INSTANCES[name] = task
    return task


def task_names() -> list[str]:
    _ensure_loaded()
    return sorted(_TASKS)


def remove_task(name: str) -> None:
    """Forget a registered task (tests, or a spec re-registered after an edit)."""
    _TASKS.pop(name, None)
    _INSTANCES.pop(name, None)


def prefixes() -> dict[str, str]:
    """Registered prefixes and their one-line descriptions."""
    _ensure_loaded()
    return {p: _PREFIX_HELP.get(p, "") for p in sorted(_PREFIXES)}


def load_entry_points() -> None:
    """Import every `scalerl.tasks` entry point; each registers tasks when loaded.

    An entry point may point at a module (registering on import), a Task subclass, or a
    zero-argument factory; the latter two are registered under the entry point's name.
    """
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin is named, not hidden
            dist = ep.dist.name if ep.dist else "?"
            raise RuntimeError(
                f"task plugin {ep.name} = {ep.value} (from {dist}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if callable(obj) and ep.name not in _TASKS:
            add_task(ep.name, obj)


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    load_entry_points()
    for path in filter(None, os.environ.get(SPEC_PATH_ENV, "").split(os.pathsep)):
        from scalerl.envs.spec import register_task_file

        register_task_file(path)
