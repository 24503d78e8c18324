"""The run config: the trainer's, the engine's and the task mixture's dataclasses in one tree.

`load_config(path, overrides)` reads a YAML recipe (a name under scalerl/recipes or a file),
applies `a.b=c` overrides with type coercion, and builds the frozen `RunConfig`; unknown keys are
errors naming the valid ones. `validate(cfg)` runs once at start-up and reports each bad value
as one line naming the field and what is allowed. No training or generation here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from scalerl.rollout.engine import EngineConfig
from scalerl.rollout.types import Budget
from scalerl.trainer.config import TrainerConfig

RECIPES_DIR = Path(__file__).parent / "recipes"
DEFAULT_RECIPE = "tiny-cpu"


class ConfigError(ValueError):
    """A bad config: one line per problem, each naming the field and what is allowed."""


@dataclass(frozen=True)
class TaskMix:
    """One task of the training mixture."""

    name: str = "arith"
    """Registered task name (see `scalerl tasks list`)."""
    weight: float = 1.0
    """Share of the prompts drawn from this task (normalised over the mixture)."""
    thinking: int | tuple[int, int] | None = None
    """Thinking budget in tokens, or a [low, high] range sampled per rollout (forced
    interruption past it); None: no thinking budget."""
    answer: int = 2048
    """Tokens allowed after </think>."""
    total: int | None = None
    """Hard cap on generated tokens (default thinking max + phrase + answer)."""

    def budget(self) -> Budget:
        return Budget(thinking=self.thinking, answer=self.answer, total=self.total)


@dataclass(frozen=True)
class RunConfig(TrainerConfig):
    """Everything one `scalerl train` run needs."""

    tasks: tuple[TaskMix, ...] = (TaskMix("arith"), TaskMix("synth_code"))
    """The task mixture: name, weight and length budget of each task."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """How the vLLM engine is started (rollout.engine.EngineConfig)."""


# ---------------------------------------------------------------------------------------------
# Building dataclasses from plain data, with coercion by type hint.

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
    """`cls(**data)` with every value coerced to its field's type; unknown keys are errors."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown key {path!r}; valid keys: {', '.join(names)}")
        kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except ValueError as e:  # a dataclass's own __post_init__ check
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def to_dict(cfg: Any) -> Any:
    """Plain data (YAML-able) of a config dataclass."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, tuple):
        return [to_dict(v) for v in cfg]
    return cfg


# ---------------------------------------------------------------------------------------------
# Recipes and overrides.

def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def read_recipe(name_or_path: str | None) -> dict[str, Any]:
    """The YAML mapping of a recipe name (scalerl/recipes/NAME.yaml) or a file path."""
    name_or_path = name_or_path or DEFAULT_RECIPE
    path = RECIPES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(f"config {name_or_path!r} is neither a file nor a recipe; recipes: "
                          f"{', '.join(recipe_names())}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a YAML mapping at the top level")
    return data


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


def _default_tasks(data: dict[str, Any]) -> dict[str, Any]:
    """Overrides of `tasks.N...` need the list present; start from the defaults if absent."""
    if "tasks" not in data:
        data["tasks"] = to_dict(RunConfig().tasks)
    return data


def load_config(name_or_path: str | None = None, overrides: list[str] = ()) -> RunConfig:
    """Recipe (default `tiny-cpu`) + overrides -> RunConfig (not yet validated)."""
    data = _default_tasks(read_recipe(name_or_path))
    for assignment in overrides:
        apply_override(data, assignment)
    return build(RunConfig, data)


# ---------------------------------------------------------------------------------------------
# Start-up validation: every value and cross-field rule, each problem one line.

def _checks(cfg: RunConfig) -> list[tuple[bool, str]]:
    """(ok, message) for every rule; messages name the field and what is allowed."""
    o, opt, loss, val = cfg.offpolicy, cfg.optim, cfg.loss, cfg.val
    return [
        (cfg.steps > 0, f"steps = {cfg.steps}: must be > 0"),
        (cfg.policy.temperature > 0, f"policy.temperature = {cfg.policy.temperature}: must be > 0"),
        (cfg.policy.cpu_threads is None or cfg.policy.cpu_threads >= 1,
         f"policy.cpu_threads = {cfg.policy.cpu_threads}: must be >= 1 or null (torch default)"),
        (opt.lr > 0, f"optim.lr = {opt.lr}: must be > 0"),
        (opt.eps > 0, f"optim.eps = {opt.eps}: must be > 0"),
        (opt.weight_decay >= 0, f"optim.weight_decay = {opt.weight_decay}: must be >= 0"),
        (all(0 <= b < 1 for b in opt.betas), f"optim.betas = {opt.betas}: each in [0, 1)"),
        (opt.warmup_steps >= 0, f"optim.warmup_steps = {opt.warmup_steps}: must be >= 0"),
        (opt.max_grad_norm is None or opt.max_grad_norm > 0,
         f"optim.max_grad_norm = {opt.max_grad_norm}: must be > 0 or null"),
        (o.k >= 1, f"offpolicy.k = {o.k}: must be >= 1"),
        (o.max_lag >= 0, f"offpolicy.max_lag = {o.max_lag}: must be >= 0"),
        (o.prompts_per_step >= 1, f"offpolicy.prompts_per_step = {o.prompts_per_step}: >= 1"),
        (o.rollouts_per_prompt >= 2,
         f"offpolicy.rollouts_per_prompt = {o.rollouts_per_prompt}: must be >= 2 (a group)"),
        (o.micro_batch_size >= 1, f"offpolicy.micro_batch_size = {o.micro_batch_size}: >= 1"),
        (loss.eps_max is None or loss.eps_max > 0, f"loss.eps_max = {loss.eps_max}: must be > 0"),
        (loss.clip_low is None or 0 < loss.clip_low < 1,
         f"loss.clip_low = {loss.clip_low}: must be in (0, 1)"),
        (loss.clip_high is None or loss.clip_high > 0,
         f"loss.clip_high = {loss.clip_high}: must be > 0"),
        (cfg.advantages.eps >= 0, f"advantages.eps = {cfg.advantages.eps}: must be >= 0"),
        (cfg.advantages.correct_reward > cfg.advantages.wrong_reward,
         "advantages.correct_reward must be greater than advantages.wrong_reward"),
        (0 < cfg.filters.retire_threshold <= 1,
         f"filters.retire_threshold = {cfg.filters.retire_threshold}: must be in (0, 1]"),
        (val.every >= 0, f"val.every = {val.every}: must be >= 0 (0 disables validation)"),
        (val.n >= 1, f"val.n = {val.n}: must be >= 1"),
        (all(1 <= k <= val.n for k in val.ks), f"val.ks = {val.ks}: each in [1, val.n={val.n}]"),
        (val.limit is None or val.limit >= 1, f"val.limit = {val.limit}: >= 1 or null"),
        (cfg.checkpoint.every >= 0, f"checkpoint.every = {cfg.checkpoint.every}: must be >= 0"),
        (cfg.checkpoint.keep >= 1, f"checkpoint.keep = {cfg.checkpoint.keep}: must be >= 1"),
        (len(cfg.tasks) >= 1, "tasks: at least one task is needed"),
        (cfg.engine.fp32_head == cfg.policy.fp32_head,
         f"engine.fp32_head = {cfg.engine.fp32_head} but policy.fp32_head = "
         f"{cfg.policy.fp32_head}: they must match (recipe §2.7)"),
    ] + [(t.weight > 0, f"tasks[{i}].weight = {t.weight}: must be > 0")
         for i, t in enumerate(cfg.tasks)]


def _task_errors(cfg: RunConfig) -> list[str]:
    from scalerl.envs.registry import UnknownTaskError, get_task

    errors = []
    for i, t in enumerate(cfg.tasks):
        try:
            get_task(t.name)
        except UnknownTaskError as e:
            errors.append(f"tasks[{i}].name: {e}")
        try:
            t.budget()
        except ValueError as e:
            errors.append(f"tasks[{i}] budget: {e}")
    names = [t.name for t in cfg.tasks]
    if len(set(names)) != len(names):
        errors.append(f"tasks: a task appears twice in {names}")
    return errors


def validate(cfg: RunConfig, *, check_tasks: bool = True) -> RunConfig:
    """Raise ConfigError listing every bad value (one line each); returns `cfg` when clean."""
    errors = [msg for ok, msg in _checks(cfg) if not ok]
    from scalerl.trainer.sources import SOURCES

    if cfg.offpolicy.mode not in SOURCES:
        errors.append(f"offpolicy.mode = {cfg.offpolicy.mode!r}: allowed here: "
                      f"{', '.join(sorted(SOURCES))}")
    if cfg.offpolicy.mode == "pipelinerl" and cfg.offpolicy.k != 1:
        errors.append(f"offpolicy.k = {cfg.offpolicy.k}: must be 1 with mode pipelinerl (its "
                      "staleness knob is offpolicy.max_lag)")
    if check_tasks:
        errors += _task_errors(cfg)
    if errors:
        raise ConfigError("\n".join(f"config: {e}" for e in errors))
    return cfg
