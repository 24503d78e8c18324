"""Every task scalerl can find: the built-ins, `scalerl.tasks` plugins and `$SCALERL_TASKS` files.

Importing this module registers the built-in tasks and kinds (static imports, the benchmarks of
envs/bench/ among them); plugins' entry
points and the task files named in `$SCALERL_TASKS` are loaded once, at the first lookup. The
lookups here (`get_task`, `get_kind`, `task_names`, `kinds`, `prefixes`) are the ones everything
above envs uses; envs/registry.py keeps the tables and the raw lookups. Nothing here builds a
task's data before it is asked for.
"""

from __future__ import annotations

import os
import threading
from importlib import metadata

import scalerl.envs.kinds as kind_registry
import scalerl.envs.registry as registry
from scalerl.envs import bench as _bench  # noqa: F401 - the field's benchmarks and training sets
from scalerl.envs.code import feedback as _feedback  # noqa: F401 - tests_feedback
from scalerl.envs.code import tasks as _code_tasks  # noqa: F401 - humaneval, synth_code
from scalerl.envs.code import verifier as _code_kind  # noqa: F401 - the `code` kind
from scalerl.envs.kinds import Kind
from scalerl.envs.math import arith as _arith  # noqa: F401 - arith, arith:<levels>
from scalerl.envs.math import arith_tool as _arith_tool  # noqa: F401 - arith_tool, arith_tool:<levels>
from scalerl.envs.math import reasoning_gym as _reasoning_gym  # noqa: F401 - rg:<dataset>
from scalerl.envs.math import verifier as _math_kind  # noqa: F401 - the `math` kind
from scalerl.envs.spec import register_task_file
from scalerl.envs.task import Task

ENTRY_POINT_GROUP = "scalerl.tasks"
SPEC_PATH_ENV = "SCALERL_TASKS"
"""os.pathsep-separated task files registered at first lookup: YAML/JSON specs, or `.py` files
of `@register_task` classes (imported)."""

_ENTRY_POINTS: dict[str, str] = {}
"""task name -> the entry point that registered it, for error messages."""
_loaded = False
_loading = False
_load_lock = threading.RLock()


def get_task(name: str) -> Task:
    """The task registered under `name` (built once, then cached); UnknownTaskError listing the
    known names, or TypeError naming the factory when it did not make a Task."""
    _ensure_loaded()
    task = registry.lookup_task(name)
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r}: {_origin(name)} made a {type(task).__name__}, "
                        "not a scalerl Task")
    return task


def get_kind(name: str) -> Kind:
    """The kind registered as `name`; UnknownTaskError listing the known kinds otherwise."""
    _ensure_loaded()
    return kind_registry.lookup_kind(name)


def task_names() -> list[str]:
    """Every registered task name (prefix families excluded), sorted."""
    _ensure_loaded()
    return registry.task_names()


def kinds() -> list[str]:
    _ensure_loaded()
    return kind_registry.kind_names()


def prefixes() -> dict[str, str]:
    """Registered prefixes and their one-line descriptions."""
    _ensure_loaded()
    return registry.prefixes()


def load_entry_points() -> None:
    """Import every `scalerl.tasks` entry point; each registers tasks when loaded.

    An entry point may point at a module (registering on import), a Task subclass, or a
    zero-argument factory; the latter two are registered under the entry point's name.
    """
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else "?"
        where = f"entry point {ep.name} = {ep.value} (from {dist})"
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin is named, not hidden
            raise RuntimeError(f"task plugin {ep.name} = {ep.value} (from {dist}) failed to load: "
                               f"{type(exc).__name__}: {exc}") from exc
        if callable(obj) and ep.name not in registry.task_names():
            registry.add_task(ep.name, obj)
            _ENTRY_POINTS[ep.name] = where


def _ensure_loaded() -> None:
    """Plugins, then `$SCALERL_TASKS` files (which may use a plugin's kind), once per process."""
    global _loaded, _loading
    if _loaded:
        return
    with _load_lock:  # re-entrant: a task file that looks a task up while loading gets through
        if _loaded or _loading:
            return
        _loading = True
        try:
            load_entry_points()
            for path in filter(None, os.environ.get(SPEC_PATH_ENV, "").split(os.pathsep)):
                register_task_file(path)
        finally:  # a broken plugin or file is reported once, by the lookup that loaded it
            _loaded, _loading = True, False


def _origin(name: str) -> str:
    if name in _ENTRY_POINTS:
        return _ENTRY_POINTS[name]
    factory = registry.factory_of(name)
    module = getattr(factory, "__module__", "?")
    return f"factory {module}.{getattr(factory, '__qualname__', repr(factory))}"
