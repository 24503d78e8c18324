"""The run config: the trainer's, the engine's, the sandbox's and the task mixture's dataclasses.

`load_config(path, overrides)` reads a YAML recipe (a name under scalerl/recipes or a file),
applies `a.b=c` overrides and builds the frozen `RunConfig` (scalerl/coerce.py does the generic
coercion; unknown keys are errors naming the valid ones). `resume_config(data, overrides)` rebuilds
a run's own config for `--resume`, where only the `RESUMABLE` settings may change. `validate(cfg)`
runs once at start-up and reports each bad value as one line naming the field and what is allowed;
it holds every cross-field rule. No training or generation here, and no engine import (the
engine's dataclass comes from rollout/engine_config.py, which imports neither torch nor vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scalerl.coerce import ConfigError, apply_override, build, to_dict
from scalerl.envs.catalog import get_task
from scalerl.envs.registry import UnknownTaskError
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.types import Budget
from scalerl.sandbox.config import SandboxConfig
from scalerl.trainer.config import TrainerConfig

__all__ = ["ConfigError", "RunConfig", "TaskMix", "build", "load_config", "recipe_names",
           "resume_config", "to_dict", "validate"]

RECIPES_DIR = Path(__file__).parent / "recipes"
DEFAULT_RECIPE = "tiny-cpu"


@dataclass(frozen=True)
class TaskMix:
    """One task of the training mixture."""

    name: str = "arith"
    """Registered task name (see `scalerl tasks list`)."""
    weight: float = 1.0
    """Share of the prompts drawn from this task (normalised over the mixture)."""
    budget: Budget = field(default_factory=Budget)
    """Length budget of this task's rollouts (thinking, answer, total, phrase: see
    rollout/types.py `Budget`)."""


@dataclass(frozen=True)
class RunConfig(TrainerConfig):
    """Everything one `scalerl train` run needs."""

    tasks: tuple[TaskMix, ...] = (TaskMix("arith"), TaskMix("synth_code"))
    """The task mixture: name, weight and length budget of each task."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """How the vLLM engine is started (rollout/engine_config.py `EngineConfig`); its LM head
    follows `policy.fp32_head`."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Where completions are checked: the code sandbox backend, worker counts, default limits
    (sandbox/config.py `SandboxConfig`)."""


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
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path}: not valid YAML ({' '.join(str(exc).split())[:200]})"
                          ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a YAML mapping at the top level")
    return data


def _default_tasks(data: dict[str, Any]) -> dict[str, Any]:
    """Overrides of `tasks.N...` need the list present; start from the defaults if absent."""
    if "tasks" not in data:
        data["tasks"] = to_dict(RunConfig().tasks)
    return data


def config_from_data(data: dict[str, Any], overrides: list[str] = ()) -> RunConfig:
    """Plain config data (a recipe's or a run's config.yaml) + overrides -> RunConfig."""
    data = _default_tasks(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    return build(RunConfig, data)


def load_config(name_or_path: str | None = None, overrides: list[str] = ()) -> RunConfig:
    """Recipe (default `tiny-cpu`) + overrides -> RunConfig (not yet validated)."""
    return config_from_data(read_recipe(name_or_path), overrides)


RESUMABLE: tuple[str, ...] = ("steps", "val", "checkpoint", "log", "sandbox",
                              "filters.max_error_frac", "filters.error_patience")
"""Settings (and sections) a `--set` may change when a run is resumed: how long it runs, what is
validated, logged and kept, where code is checked, when verifier errors stop it. Anything else
would change what the run trains on mid-run, so `resume_config` refuses it."""


def resumable(key: str) -> bool:
    key = key.strip()
    return any(key == r or key.startswith(f"{r}.") for r in RESUMABLE)


def resume_config(data: dict[str, Any], overrides: list[str] = ()
                  ) -> tuple[RunConfig, dict[str, tuple[Any, Any]]]:
    """A run's own config (`data`: its config.yaml) with `overrides`, and what they changed
    ({key: (old, new)}); ConfigError (one line) when they change anything not `RESUMABLE`
    (repeating the run's own values is fine)."""
    before, after = config_from_data(data), config_from_data(data, overrides)
    changes = changed_fields(to_dict(before), to_dict(after))
    refused = [f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items() if not resumable(k)]
    if refused:
        raise ConfigError(f"--set {'; '.join(refused)}: cannot change when a run is resumed (it "
                          f"would change what the run trains on); may change: "
                          f"{', '.join(RESUMABLE)}")
    return after, changes


def changed_fields(old: Any, new: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old, new)} for every leaf that differs between two config mappings."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in dict.fromkeys([*old, *new]):
            out |= changed_fields(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return {} if old == new else {prefix.rstrip("."): (old, new)}


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
        (cfg.policy.logit_chunk_tokens >= 1,
         f"policy.logit_chunk_tokens = {cfg.policy.logit_chunk_tokens}: must be >= 1"),
        (cfg.policy.collective_timeout_s > 0,
         f"policy.collective_timeout_s = {cfg.policy.collective_timeout_s}: must be > 0"),
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
        (0 <= cfg.filters.max_error_frac <= 1,
         f"filters.max_error_frac = {cfg.filters.max_error_frac}: must be in [0, 1]"),
        (cfg.filters.error_patience >= 1,
         f"filters.error_patience = {cfg.filters.error_patience}: must be >= 1"),
        (val.every >= 0, f"val.every = {val.every}: must be >= 0 (0 disables validation)"),
        (val.n >= 1, f"val.n = {val.n}: must be >= 1"),
        (all(1 <= k <= val.n for k in val.ks), f"val.ks = {val.ks}: each in [1, val.n={val.n}]"),
        (val.limit is None or val.limit >= 1, f"val.limit = {val.limit}: >= 1 or null"),
        (cfg.checkpoint.every >= 0, f"checkpoint.every = {cfg.checkpoint.every}: must be >= 0"),
        (cfg.checkpoint.keep >= 1, f"checkpoint.keep = {cfg.checkpoint.keep}: must be >= 1"),
        (len(cfg.tasks) >= 1, "tasks: at least one task is needed"),
        (o.mode != "pipelinerl" or o.k == 1,
         f"offpolicy.k = {o.k}: must be 1 with mode pipelinerl (its staleness knob is "
         "offpolicy.max_lag)"),
    ] + [(t.weight > 0, f"tasks[{i}].weight = {t.weight}: must be > 0")
         for i, t in enumerate(cfg.tasks)]



def _task_errors(cfg: RunConfig) -> list[str]:
    errors = []
    for i, t in enumerate(cfg.tasks):
        try:
            get_task(t.name)
        except UnknownTaskError as e:
            errors.append(f"tasks[{i}].name: {e}")
    names = [t.name for t in cfg.tasks]
    if len(set(names)) != len(names):
        errors.append(f"tasks: a task appears twice in {names}")
    return errors


def validate(cfg: RunConfig, *, check_tasks: bool = True) -> RunConfig:
    """Raise ConfigError listing every bad value (one line each); returns `cfg` when clean."""
    errors = [msg for ok, msg in _checks(cfg) if not ok]
    if check_tasks:
        errors += _task_errors(cfg)
    if errors:
        raise ConfigError("\n".join(f"config: {e}" for e in errors))
    return cfg
