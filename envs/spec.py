"""Task files: YAML/JSON task specs (file-backed tasks, no Python) and `.py` files of tasks.

A spec holds one task, a list, or `{"tasks": [...]}`; each names a kind, a data file (relative to
the spec), optional field names, held-out file, system prompt, scoring options, the share of
unusable rows tolerated (`max_bad_fraction`) and, for a multi-turn task, its environment
(`tools: [python, mypkg.tools:lookup]`, `feedback: tests`, or `environment: {class: ...}` /
`{openenv: URL}` for an environment written for another harness, envs/adapters/), with
`max_turns` and `max_observation_chars`. Validation is
eager and fails in one line naming the file and key; data is read when a task is first used.
A `.py` task file is imported so its `@register_task` decorators run. A spec's kind must be
registered already: the catalog (envs/catalog.py) loads plugins before `$SCALERL_TASKS` files.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from scalerl.envs import python_env as _python_env  # noqa: F401 - the `python` environment
from scalerl.envs.code import feedback as _feedback  # noqa: F401 - the `tests_feedback` one
from scalerl.envs.data import check_fractions, is_hub_id
from scalerl.envs.environment import Environment, environment_factory
from scalerl.envs.filetask import FileTask
from scalerl.envs.kinds import lookup_kind
from scalerl.envs.registry import add_task, task_names
from scalerl.envs.rows import MAX_BAD_FRACTION, check_fraction

REQUIRED_KEYS: tuple[str, ...] = ("name", "kind", "data")
OPTIONAL_KEYS: tuple[str, ...] = (
    "test_data", "fields", "test_fraction", "val_fraction", "seed", "system_prompt",
    "requires_thinking", "options", "description", "max_bad_fraction",
    "tools", "feedback", "environment", "max_turns", "max_observation_chars",
)
KEY_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "test_data": (str, "a path or hub id"), "fields": (Mapping, "a mapping"),
    "test_fraction": ((int, float), "a number"), "val_fraction": ((int, float), "a number"),
    "seed": (int, "an integer"), "system_prompt": (str, "a string"),
    "requires_thinking": (bool, "true or false"), "options": (Mapping, "a mapping"),
    "description": (str, "a string"),
    "max_bad_fraction": ((int, float), "a number in [0, 1]"),
    "tools": (list, "a list of tools: built-in names (python) or package.module:function"),
    "feedback": (str, "tests"),
    "environment": (Mapping, "a mapping: {class: package.module:Class} or {openenv: URL}"),
    "max_turns": (int, "an integer >= 1"),
    "max_observation_chars": (int, "an integer (characters)"),
}
FEEDBACK_ENVIRONMENTS: dict[str, str] = {"tests": "tests_feedback"}
"""`feedback:` value -> the registered environment (envs/code/feedback.py for `tests`)."""
ENVIRONMENT_KEYS: tuple[str, ...] = ("tools", "feedback", "environment", "max_turns",
                                     "max_observation_chars")
"""The keys that make a spec's task multi-turn; the last two are the environment's limits."""
_FROM_SPEC: dict[str, Path] = {}  # task name -> spec file that registered it
_IMPORTED: dict[Path, list[str]] = {}  # python task file -> the task names it registered


class SpecError(ValueError):
    """A bad task spec; the one-line message names the file, the task and the key."""


def read_spec(path: str | Path) -> list[dict[str, Any]]:
    """The task entries of a spec file, validated (keys, types, kind, fractions)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such task spec file")
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: not valid {path.suffix[1:] or 'YAML'} ({_short(exc)})") from exc
    if isinstance(doc, Mapping) and "tasks" in doc:
        doc = doc["tasks"]
    entries = [doc] if isinstance(doc, Mapping) else doc
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"{path}: expected a task, a list of tasks or {{tasks: [...]}}")
    return [_validate(path, i, e) for i, e in enumerate(entries, start=1)]


def _validate(path: Path, i: int, entry: Any) -> dict[str, Any]:
    where = f"{path}: task #{i}"
    if not isinstance(entry, Mapping):
        raise SpecError(f"{where}: expected a mapping of keys, got {type(entry).__name__}")
    where = f"{path}: task #{i} ({entry.get('name', '?')})"
    valid = REQUIRED_KEYS + OPTIONAL_KEYS
    for key in entry:
        if key not in valid:
            raise SpecError(f"{where}: unknown key {key!r}; valid keys: {', '.join(valid)}")
    for key in REQUIRED_KEYS:
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise SpecError(f"{where}: {key!r} is required (a non-empty string)")
    for key, (typ, what) in KEY_TYPES.items():
        bad_bool = isinstance(entry.get(key), bool) and typ is not bool
        if key in entry and (not isinstance(entry[key], typ) or bad_bool):
            raise SpecError(f"{where}: {key!r} must be {what}, got {entry[key]!r:.60}")
    try:
        lookup_kind(entry["kind"])
        check_fractions(entry.get("test_fraction", 0.1), entry.get("val_fraction", 0.0))
        check_fraction(entry.get("max_bad_fraction", MAX_BAD_FRACTION))
        environment_from_spec(entry)  # built once here so a bad value fails at registration
    except (KeyError, ValueError, TypeError) as exc:
        raise SpecError(f"{where}: {_short(exc)}") from exc
    out = dict(entry)
    for key in ("data", "test_data"):
        if out.get(key):
            out[key] = _resolve(path, str(out[key]))
    return out


def _resolve(spec_path: Path, data: str) -> str:
    if is_hub_id(data) or Path(data).is_absolute():
        return data
    local = spec_path.parent / data
    return str(local) if local.exists() or not is_hub_id(data) else data


def environment_from_spec(entry: Mapping[str, Any],
                          verifier_options: Mapping[str, Any] | None = None) -> Environment | None:
    """The environment a spec entry's `tools` / `feedback` / `environment` key asks for, with
    its `max_turns` and `max_observation_chars` (for feedback, also the task's
    `verifier_options`: its public tests run as its judge runs tests); None for a single-turn
    task. ValueError naming the key and what is valid."""
    given = [k for k in ("tools", "feedback", "environment") if entry.get(k) is not None]
    limits = {k: entry[k] for k in ("max_turns", "max_observation_chars") if k in entry}
    if not given:
        if limits:
            verb = "need" if len(limits) > 1 else "needs"
            raise ValueError(f"{' and '.join(map(repr, limits))} {verb} tools:, feedback: or "
                             "environment: (a multi-turn task)")
        return None
    if len(given) > 1:
        raise ValueError(f"{' and '.join(map(repr, given))} cannot both be set: a task has one "
                         "environment")
    if given == ["tools"]:
        return tools_environment(entry["tools"], limits)
    if given == ["environment"]:
        from scalerl.envs.adapters import from_spec

        return from_spec(entry["environment"], limits)
    return feedback_environment(entry, limits, verifier_options)


def tools_environment(tools: list, limits: Mapping[str, Any]) -> Environment:
    """`tools: [python, package.module:function, ...]`: the `python` environment for the
    interpreter alone, else a ToolEnvironment of them all (envs/tool_env.py)."""
    from scalerl.envs.tool_env import ToolEnvironment
    from scalerl.envs.tools import ToolError

    if not tools or not all(isinstance(t, str) and t for t in tools):
        raise ValueError(f"'tools' must be a non-empty list of tool names (python) or "
                         f"package.module:function; got {tools!r:.60}")
    if tools == ["python"]:
        return environment_factory("python")(**limits)
    try:
        return ToolEnvironment(tools, **limits)
    except ToolError as exc:
        raise ValueError(str(exc)) from None


def feedback_environment(entry: Mapping[str, Any], limits: Mapping[str, Any],
                         verifier_options: Mapping[str, Any] | None) -> Environment:
    feedback = entry["feedback"]
    if feedback not in FEEDBACK_ENVIRONMENTS:
        raise ValueError(f"'feedback' must be one of {', '.join(FEEDBACK_ENVIRONMENTS)}; "
                         f"got {feedback!r:.60}")
    if entry.get("kind") != "code":
        raise ValueError(f"'feedback: {feedback}' needs kind 'code' (its public tests run "
                         f"after each answer); kind is {entry.get('kind')!r}")
    extra = dict(limits)
    if verifier_options is not None:
        extra["verifier_options"] = dict(verifier_options)
    return environment_factory(FEEDBACK_ENVIRONMENTS[feedback])(**extra)


def task_from_entry(entry: Mapping[str, Any]) -> FileTask:
    kw = {k: entry[k] for k in OPTIONAL_KEYS
          if k in entry and k != "description" and k not in ENVIRONMENT_KEYS}
    task = FileTask(entry["name"], entry["kind"], entry["data"], **kw)
    task.environment = environment_from_spec(entry, task.verifier_options())
    return task


def register_spec_file(path: str | Path) -> list[str]:
    """Register every task of a spec file; returns their names. Re-registering the same file is
    allowed (it replaces its own tasks); a name taken by another source is an error. A `.py`
    file is a task file and is imported, as `register_task_file` (and `--spec`) do."""
    if Path(path).suffix.lower() == ".py":
        return register_task_file(path)
    return _register_spec(path)


def _register_spec(path: str | Path) -> list[str]:
    resolved = Path(path).resolve()
    names = []
    for entry in read_spec(path):
        name = entry["name"]
        owner = _FROM_SPEC.get(name)
        if name in task_names() and owner != resolved:
            where = f"from {owner}" if owner else "by another module"
            raise SpecError(f"{path}: task {name!r} is already registered {where}")
        add_task(name, lambda e=entry: task_from_entry(e), replace=True)
        _FROM_SPEC[name] = resolved
        names.append(name)
    return names


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def register_task_file(path: str | Path) -> list[str]:
    """A `.py` file is imported (its `@register_task` decorators run); anything else is read as
    a YAML/JSON spec. Returns the names registered. Importing the same file twice is a no-op."""
    if Path(path).suffix.lower() != ".py":
        return _register_spec(path)
    resolved = Path(path).resolve()
    if resolved in _IMPORTED:
        return _IMPORTED[resolved]
    if not resolved.is_file():
        raise SpecError(f"{path}: no such task file")
    before = set(task_names())
    name = f"scalerl_user_tasks.{resolved.stem}"
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file is broken: say which and why, in one line
        sys.modules.pop(name, None)
        raise SpecError(f"{path}: import failed: {type(exc).__name__}: {_short(exc)}") from exc
    _IMPORTED[resolved] = sorted(set(task_names()) - before)
    return _IMPORTED[resolved]

