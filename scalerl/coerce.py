"""Plain data (parsed YAML) into frozen dataclasses, and back; `a.b.c=value` overrides.

`build(cls, data)` makes `cls(**data)` with every value coerced to its field's type hint (unions,
literals, tuples, nested dataclasses, bool/int/float/str); an unknown key is an error listing the
valid keys, a bad value an error naming the field and what is allowed (`ConfigError`, one line).
`apply_override` applies one `--set` to the plain data before building; `to_dict` goes back.
Nothing here knows what a run, a recipe or a validation rule is (that is scalerl/config.py).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

import yaml

from scalerl.trainer.config import FieldError


class ConfigError(ValueError):
    """A bad config: one line per problem, each naming the field and what is allowed."""


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, args, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where} = {value!r}: allowed: {', '.join(map(str, args))}")
        return value
    if origin is tuple:
        return _coerce_tuple(value, args, where)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where} = {value!r}: expected a mapping of {tp.__name__} fields")
        return build(tp, value, where)
    return _coerce_scalar(value, tp, where)


def coerce_value(value: Any, tp: Any, where: str) -> Any:
    """`value` as type `tp` by the rules `build` applies to each field (a `--set` string
    parsed), else a ConfigError naming `where` and what is allowed."""
    return _coerce(value, tp, where)


def _coerce_union(value: Any, args: tuple, where: str) -> Any:
    is_none = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
    if is_none and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(value, arg, where)
        except ConfigError as e:
            errors.append(str(e).split(": ", 1)[-1])
    raise ConfigError(f"{where} = {value!r}: allowed: {' | '.join(errors)}")


def _coerce_tuple(value: Any, args: tuple, where: str) -> tuple:
    if isinstance(value, str):
        value = [v.strip() for v in value.strip("[]()").split(",") if v.strip()]
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where} = {value!r}: expected a list")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise ConfigError(f"{where} = {value!r}: expected a list of {len(args)} values")
    return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args,
                                                                               strict=True)))


def _coerce_scalar(value: Any, tp: Any, where: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        raise ConfigError(f"{where} = {value!r}: allowed: true or false")
    if tp in (int, float):
        if isinstance(value, bool) or (tp is int and isinstance(value, float)):
            raise ConfigError(f"{where} = {value!r}: expected {tp.__name__}")
        try:
            return tp(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} = {value!r}: expected {tp.__name__}") from None
    if tp is str:
        if isinstance(value, dict | list):
            raise ConfigError(f"{where} = {value!r}: expected a string")
        return str(value)
    raise ConfigError(f"{where}: unsupported field type {tp!r}")


def build(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """`cls(**data)` with every value coerced to its field's type; unknown keys are errors.

    Every problem is reported, one line each (ConfigError): every key is coerced before any is
    refused, and a dataclass's own `__post_init__` checks name their fields under `where`.
    """
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs, errors = {}, []
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            errors.append(f"unknown key {path!r}; valid keys: {', '.join(names)}")
            continue
        try:
            kwargs[key] = _coerce(value, hints[key], path)
        except ConfigError as e:
            errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(errors))
    try:
        return cls(**kwargs)
    except FieldError as e:  # the dataclass's own checks, named under this section
        raise ConfigError(e.lines(where)) from None
    except ValueError as e:  # a dataclass's own __post_init__ check
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def to_dict(cfg: Any) -> Any:
    """Plain data (YAML-able) of a config dataclass."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, tuple):
        return [to_dict(v) for v in cfg]
    return cfg


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` (YAML value; list items by index: `tasks.0.weight=2`)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. loss.name=grpo")
    key, raw = assignment.split("=", 1)
    value = yaml.safe_load(raw) if raw.strip() else ""
    parts = key.strip().split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        node = _child(node, part, ".".join(parts[:i + 1]), parts[i + 1])
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, key)] = value
    else:
        node[last] = value


def _index(node: list, part: str, where: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"--set {where}: {part!r} is not an index of a list of {len(node)}")
    return int(part)


def _child(node: Any, part: str, where: str, next_part: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, where)]
    if not isinstance(node.get(part), dict | list):
        node[part] = [] if next_part.isdigit() else {}
    return node[part]
