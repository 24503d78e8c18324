"""The run config: the trainer's, the engine's, the sandbox's and the task mixture's dataclasses.

`load_config(path, overrides)` reads a YAML recipe (a name under scalerl/recipes or a file),
applies `a.b=c` overrides and builds the frozen `RunConfig` (scalerl/coerce.py does the generic
coercion; unknown keys are errors naming the valid ones; each section's dataclass checks its own
fields as it is built, so every bad value is one line naming the field and what is allowed).
`resume_config(data, overrides)` rebuilds a run's own config for `--resume`, where only the
`RESUMABLE` settings may change. `validate(cfg)` runs once at start-up with the rules across
parts: the task mixture. No training or generation here, and no engine import (the
engine's dataclass comes from rollout/engine_config.py, which imports neither torch nor vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scalerl.coerce import ConfigError, apply_override, build, coerce_value, to_dict
from scalerl.envs.catalog import get_task
from scalerl.envs.grading import Grading, VerifierConfig
from scalerl.envs.registry import UnknownTaskError
from scalerl.local_data import task_with_data
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.types import Budget
from scalerl.sandbox.config import SandboxConfig
from scalerl.trainer.config import LogConfig, TrainerConfig, check_fields

__all__ = ["ConfigError", "PlanConfig", "RunConfig", "TaskMix", "build", "load_config",
           "recipe_names", "resume_config", "to_dict", "validate"]

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
    data: str | None = None
    """A local copy of the task's data in its source's schema (a jsonl/json/parquet file or a
    save_to_disk directory), read instead of the hub; None: the task's own source. `scalerl train
    --data NAME=PATH` sets it."""
    revision: str | None = None
    """The hub commit, branch or tag a built-in hub dataset is read at instead of its pinned
    revision (docs/benchmarks.md); None: the pin. `scalerl train --revision NAME=REV` sets it."""

    SECTION = "task"

    def __post_init__(self) -> None:
        check_fields(self, [(self.weight > 0, "weight", "must be > 0"),
                            (self.data is None or (isinstance(self.data, str) and bool(self.data)),
                             "data", "must be a path or null"),
                            (self.revision is None or (isinstance(self.revision, str)
                                                       and bool(self.revision.strip())),
                             "revision", "must be a commit, branch or tag, or null"),
                            (self.data is None or self.revision is None, "revision",
                             "cannot be given with data: (a local copy has no hub revision)")])


@dataclass(frozen=True)
class PlanConfig:
    """How the dry run and a launch judge a layout of the node (scalerl/planning/)."""

    memory_margin: float = 0.1
    """Share of each GPU's memory, as CUDA reports it (an 80 GB H100 reports 81,559 MiB, 79.6
    GiB), that the memory model's peak must leave free: a trainer rank (and an engine sharing
    its GPU) fits only at <= (1 - memory_margin) x the GPU, an engine only at <= (1 -
    memory_margin) x its GPU. 0.1 until scripts/gpu-check has measured the model's terms
    (docs/gpu.md); 0 trusts the model to the byte."""
    max_slowdown: float | None = 3.0
    """A launch (or a dry run whose ranks are given) whose predicted step is more than this many
    times the fastest fitting split's is refused, naming that split's launch line; null never
    refuses."""

    SECTION = "plan"

    def __post_init__(self) -> None:
        check_fields(self, [
            (0 <= self.memory_margin < 0.5, "memory_margin", "must be in [0, 0.5)"),
            (self.max_slowdown is None or self.max_slowdown >= 1, "max_slowdown",
             "must be >= 1, or null (never refuse)")])


@dataclass(frozen=True)
class RunConfig(TrainerConfig):
    """Everything one `scalerl train` run needs."""

    tasks: tuple[TaskMix, ...] = (TaskMix("arith"), TaskMix("synth_code"))
    """The task mixture: name, weight and length budget of each task."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """How the vLLM engine is started (rollout/engine_config.py `EngineConfig`); its LM head
    follows `policy.fp32_head`."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Where model-written code runs: the sandbox backend, its workers, the caps of one grading
    run (sandbox/config.py `SandboxConfig`)."""
    verifiers: VerifierConfig = field(default_factory=VerifierConfig)
    """How the verifiers themselves run: the math-verify pool's size (envs/grading.py
    `VerifierConfig`)."""
    plan: PlanConfig = field(default_factory=PlanConfig)
    """How the dry run and a launch judge the split of the node: the memory margin, the
    slowest launch allowed (`PlanConfig`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, [(len(self.tasks) >= 1, "tasks", "at least one task is needed")])

    @property
    def grading(self) -> Grading:
        """What every verdict of this run needs: its sandbox and verifier settings."""
        return Grading(sandbox=self.sandbox, verifiers=self.verifiers)


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
    return build(RunConfig, _tensorboard_flag(data))


def _tensorboard_flag(data: dict[str, Any]) -> dict[str, Any]:
    """`log.tensorboard: true|false`, the spelling before `log.trackers` (runs made before it,
    `--set log.tensorboard=false`), read as tensorboard in or out of `log.trackers`."""
    log = data.get("log")
    if not isinstance(log, dict) or "tensorboard" not in log:
        return data
    log = dict(log)
    on = coerce_value(log.pop("tensorboard"), bool, "log.tensorboard")
    trackers = coerce_value(log.get("trackers", LogConfig.trackers), tuple[str, ...],
                            "log.trackers")
    trackers = [t for t in trackers if t != "tensorboard"]
    log["trackers"] = ["tensorboard", *trackers] if on else trackers
    return {**data, "log": log}


def load_config(name_or_path: str | None = None, overrides: list[str] = ()) -> RunConfig:
    """Recipe (default `tiny-cpu`) + overrides -> RunConfig (not yet validated)."""
    return config_from_data(read_recipe(name_or_path), overrides)


RESUMABLE: tuple[str, ...] = ("steps", "val", "checkpoint", "log", "sandbox", "verifiers", "plan",
                              "filters.max_error_frac", "filters.error_patience",
                              "engine.servers",
                              "engine.weight_timeout_s", "engine.start_timeout_s",
                              "engine.server_timeout_s",
                              "engine.server_request_timeout_s", "engine.server_wait_s",
                              "engine.server_max_requests", "engine.log_stats",
                              "offpolicy.max_in_flight",
                              "offpolicy.batch_wait_s", "offpolicy.stall_s")
"""Settings (and sections) a `--set` may change when a run is resumed: how long it runs, what is
validated, logged and kept, where code is checked, when verifier errors stop it, how long it
waits for the generator, and which vLLM servers generate (`engine.servers`: infrastructure; a
resumed run joins every listed server afresh and puts its checkpoint's weights and version on
each before it gets a request, a replaced or added one alike; what a server serves must still
match, checked as it joins: at least `engine.max_model_len`, the LM head in the trainer's
precision, the run's weights loaded from `engine.weights_dir`, so a model of the run's shapes).
Anything else would change what the run trains on mid-run (the model, dtype, sampling, lengths,
the weight transport), so `resume_config` refuses it."""


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
# Start-up validation: the rules across parts (each section checked itself when it was built).

def _task_errors(cfg: RunConfig) -> list[str]:
    errors = []
    for i, t in enumerate(cfg.tasks):
        try:
            get_task(t.name)
        except UnknownTaskError as e:
            errors.append(f"tasks[{i}].name: {e}")
            continue
        for key in ("data", "revision"):
            if getattr(t, key) is None:
                continue
            try:  # the copy the run will use (scalerl/local_data.py)
                task_with_data(t.name, t.data, t.revision)
            except ValueError as e:
                errors.append(f"tasks[{i}].{key}: {e}")
    names = [t.name for t in cfg.tasks]
    if len(set(names)) != len(names):
        errors.append(f"tasks: a task appears twice in {names}")
    return errors


def validate(cfg: RunConfig) -> RunConfig:
    """Raise ConfigError listing every task problem (one line each); returns `cfg` when clean.
    (Each section's own values were checked when it was built.)"""
    errors = _task_errors(cfg)
    if errors:
        raise ConfigError("\n".join(errors))
    return cfg
