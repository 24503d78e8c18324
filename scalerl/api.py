"""The Python API: `score`, `evaluate`, `generate` and `train` from a script or a notebook.

Each function runs its command's own code: the keyword arguments are read by the command's
parser (scalerl/commands/<name>.py `configure`, so a setting is checked and defaulted exactly as
its flag: `answer_budget=32` is `--answer-budget 32`), then the function that command's `run`
calls does the work. Results are frozen dataclasses. A failure raises `CommandError`, whose
message is the line the command prints and `exit_code` its exit status. Processes started during
a call (vLLM's engine, the verifier pools) never import the caller's `__main__`
(envs/caller_main.py): a script without a main guard, or fed on stdin, works. What it does not
do: print results (progress bars and notes still go to stderr), shell out to the `scalerl`
command, or keep an engine between calls (each `evaluate`/`generate`/`train` starts its own and
closes it). docs/python-api.md has an example of each.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from scalerl.commands import CommandError
from scalerl.commands.score import Verdict
from scalerl.config import RunConfig
from scalerl.envs.caller_main import no_caller_main
from scalerl.rollout.heldout import EvalReport

if TYPE_CHECKING:
    from scalerl.evaluation.report import EvalSettings

__all__ = ["CommandError", "Evaluation", "Generation", "ModelEvaluation", "TrainResult",
           "Verdict", "evaluate", "generate", "score", "train"]

_PRINTING = ("json",)
"""Flags that only choose how a command prints: not API settings."""


# --- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelEvaluation:
    """One model (or checkpoint) evaluated: its figures per task and overall."""

    model: str
    """The model directory (for `rollouts=`: the rollouts file)."""
    label: str
    step: int | None
    """The training step of a run's checkpoint; None for a plain model."""
    report: EvalReport
    """`report.tasks[name]` / `report.overall`: TaskResult (pass_at[k], mean_at_n, stderr,
    status_frac, truncated_frac, ...; rollout/heldout.py)."""
    generated_samples: int = 0
    cached_samples: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` measured: one ModelEvaluation per model, in step order for a run dir."""

    models: tuple[ModelEvaluation, ...]
    settings: EvalSettings | None = None
    """The settings sampled with (protocol, n, ks, temperature, budgets...); None for
    `rollouts=`."""
    out: Path | None = None
    """Where results.json, results.md (results.png) and the rollout cache are; None for
    `rollouts=`."""
    contamination: Mapping[str, Any] | None = None
    results: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """results.json's content (for `rollouts=`: the report as `scalerl eval --json` prints it)."""

    @property
    def report(self) -> EvalReport:
        """The last model's report (a run dir's latest checkpoint)."""
        return self.models[-1].report


@dataclass(frozen=True)
class Generation:
    """What `generate` made: the scored Rollouts and their summary."""

    rollouts: tuple
    """rollout/types.py Rollout: sample_id, task, token_ids, logprobs, finish_reason, score
    (status, detail), ...; `to_row()` is the JSONL row `scalerl generate` writes."""
    summary: Mapping[str, Any]
    """What `scalerl generate --json` prints: pass_rate, statuses, interrupted_frac,
    truncated_frac, tokens_per_s, engine_memory_mb, ..."""
    out: Path | None = None
    engine_log: Path | None = None
    """Where the engine's own output went (None: on the terminal, or vLLM servers)."""


@dataclass(frozen=True)
class TrainResult:
    """A finished run: what its summary.json holds, and where the run is."""

    run_dir: Path
    config: RunConfig
    """The resolved config the run trained with (its config.yaml)."""
    steps: int
    validations: tuple[Mapping[str, float], ...]
    """Each validation's metrics (`step`, `val/<task>/pass@1`, ...), in order."""
    wall_s: float
    peak_rss_mb: float
    summary: Mapping[str, Any]
    """summary.json as written."""


# --- the four jobs ------------------------------------------------------------------------------
_Job = TypeVar("_Job", bound=Callable[..., Any])


def _job(fn: _Job) -> _Job:
    """`fn` with every process it starts kept from the caller's `__main__`."""
    @functools.wraps(fn)
    def job(*args: Any, **kwargs: Any) -> Any:
        with no_caller_main():
            return fn(*args, **kwargs)

    return job  # type: ignore[return-value]


@_job
def score(rows: Iterable[Mapping[str, Any]], *, workers: int = 4, skip_bad: bool = False,
          tool_format: str = "plain", **options: Any) -> list[Verdict]:
    """The verdict on each row, in input order, as `scalerl score` gives it.

    A row is `{"id", "kind", "completion", <gold: "answer" | "tests">}`, `{"id", "task",
    "sample_id", "completion"}`, or with `"turns": [assistant text, ...]` instead of the
    completion for a task with an environment (docs/commands/score.md). Rows are read as their
    JSON form. `options`: `spec`, `data`, `revision` (the task flags); `sandbox`,
    `math_workers`, `cluster`, `ray_address` (the grading flags: `cluster="ray"` grades on a Ray
    cluster's actors). A malformed row raises CommandError (`scalerl score: line N: ...`), or with
    `skip_bad` is reported on stderr and left out."""
    from scalerl.commands import score as command

    args = command_args("score", dict(workers=workers, skip_bad=skip_bad,
                                      tool_format=tool_format, **options),
                        excluded=("input", "out"))
    sources, graded = command.check(args)
    verdicts: list[Verdict] = []
    _, _, fatal = command.score_rows(
        _json_lines(rows), verdicts.append, sys.stderr, workers=args.workers,
        skip_bad=args.skip_bad, sources=sources, tool_format=args.tool_format, grading=graded)
    if fatal:
        raise CommandError(f"scalerl score: {fatal}")
    return verdicts


@_job
def evaluate(model: str | Path | Sequence[str | Path] | None = None, *,
             tasks: str | Sequence[str] | None = None, n: int | None = None,
             k: str | Sequence[int] | None = None, limit: int | None = None,
             out: str | Path | None = None, rollouts: str | Path | None = None,
             **options: Any) -> Evaluation:
    """Held-out pass@k / mean@n of a model directory, a run directory (every checkpoint, with
    the run's tasks, budgets, temperature and engine), or several, as `scalerl eval --model`;
    or of scored rollouts already made (`rollouts=`, no model).

    `options`: every other flag of `scalerl eval` by its name (`protocol`, `split`,
    `temperature`, `top_p`, `seed`, `train_tasks`, `answer_budget`, `max_model_len`, `server`,
    `tools`, `spec`, `data`, `log_with`, ...). `out`: where results.json, results.md and the
    rollout cache go (default: a new temporary directory)."""
    from scalerl.commands import eval as command

    if rollouts is None and out is None:  # made by the evaluation itself, once it starts
        out = Path(tempfile.gettempdir()) / f"scalerl-eval-{uuid.uuid4().hex[:12]}"
    models = [model] if isinstance(model, str | Path) else model
    args = command_args("eval", dict(model=models, tasks=tasks, n=n, k=k, limit=limit, out=out,
                                     rollouts=rollouts, **options), excluded=_PRINTING)
    done = command.evaluate(args)
    entries = done.results.get("models") or [{}] * len(done.reports)
    evaluated = tuple(
        ModelEvaluation(ref.path, ref.label, ref.step, report,
                        e.get("generated_samples", 0), e.get("cached_samples", 0),
                        e.get("seconds", 0.0))
        for (ref, report), e in zip(done.reports, entries, strict=True))
    return Evaluation(evaluated, done.plan.settings if done.plan else None,
                      Path(out) if rollouts is None else None, done.contamination,
                      _frozen(done.results))


@_job
def generate(model: str | Path | None, task: str, *, n: int = 1, limit: int | None = None,
             split: str = "test", temperature: float = 1.0, seed: int = 0,
             out: str | Path | None = None, **options: Any) -> Generation:
    """Scored rollouts of `model` (a model directory, a hub id, or "tiny") on `task`'s `split`,
    as `scalerl generate`: `n` per sample, on `limit` evenly spaced samples.

    `options`: every other flag of `scalerl generate` by its name (`thinking_budget` "A" or
    "A:B", `answer_budget`, `max_tokens`, `dtype`, `kv_cache_gib`, `max_model_len`, `server`,
    `tools`, `sandbox`, `spec`, `data`, `verbose`, ...). With `out` the rows are also written
    there (JSONL) as they finish."""
    from scalerl.commands import generate as command

    args = command_args("generate", dict(model=model, task=task, n=n, limit=limit, split=split,
                                         temperature=temperature, seed=seed, out="-",
                                         **options), excluded=_PRINTING)
    args.out = None if out is None else str(out)
    done = command.generate(args)
    return Generation(done.rollouts, _frozen(done.summary), None if out is None else Path(out),
                      done.log)


@_job
def train(config: str | Path | RunConfig | None = None,
          overrides: Mapping[str, Any] | Sequence[str] = (), *, run_dir: str | Path | None = None,
          resume: bool = False, **options: Any) -> TrainResult | None:
    """Train a policy as `scalerl train` does, and return what its summary.json holds.

    `config`: a recipe name, a YAML file or a RunConfig (default: the embedded tiny-cpu run).
    `overrides`: `{"steps": 4, "val.every": 0}` or `["steps=4"]`, as `--set`. `options`:
    `log_with`, `verbose`, `spec`, `data`, `revision`. A run stopped on verifier errors raises
    CommandError (exit_code 4) after its checkpoint and summary.json are written. None on
    processes other than rank 0 of a launch."""
    from scalerl.commands import train as command

    base = config if isinstance(config, RunConfig) else None
    sets = _assignments(overrides)
    args = command_args("train", dict(config=None if base is not None else config, set=sets,
                                      run_dir=run_dir, resume=resume, **options),
                        excluded=("print_config", "dry_run", "json", "gpus", "gpu_gib", "ranks",
                                  "gpu", "completion_tokens", "prompt_tokens",
                                  "completion_rms"))
    done = command.train(args, base)
    if done is None:
        return None
    if done.summary["stopped"]:
        raise CommandError(command.stopped_line(done), 4)
    s = done.summary
    return TrainResult(done.run_dir, done.config, s["steps"],
                       tuple(_frozen(v) for v in s["validations"]), s["wall_s"],
                       s["peak_rss_mb"], _frozen(s))


# --- settings -> the command's arguments --------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """A command's parser whose errors raise (the line argparse would print last)."""

    def error(self, message: str):  # type: ignore[override]
        raise CommandError(f"{self.prog}: error: {message}")


def command_args(command: str, settings: Mapping[str, Any],
                 excluded: Sequence[str] = ()) -> argparse.Namespace:
    """`settings` (flag names with `_`, None: not given) read by `scalerl COMMAND`'s own
    parser, as if given on its command line; TypeError for a name it has no flag for."""
    module = importlib.import_module(f"scalerl.commands.{command}")
    parser = _Parser(prog=f"scalerl {command}")
    module.configure(parser)
    actions = {a.dest: a for a in parser._actions
               if a.option_strings and a.dest not in ("help", *excluded)}
    argv: list[str] = []
    for name, value in settings.items():
        if name not in actions:
            raise TypeError(f"scalerl.api: `scalerl {command}` has no setting {name!r}; "
                            f"its settings: {', '.join(sorted(actions))}")
        argv += _flag(actions[name], value)
    return parser.parse_args(argv)


def _flag(action: argparse.Action, value: Any) -> list[str]:
    """The command-line words that give `action` the Python `value` (None: none)."""
    opt = action.option_strings[0]
    if value is None:
        return []
    if isinstance(action, argparse.BooleanOptionalAction):
        return [opt if value else action.option_strings[1]]
    if action.nargs == 0:  # store_true
        return [opt] if value else []
    if isinstance(value, Mapping):  # --data / --revision: NAME=VALUE pairs
        value = [f"{k}={v}" for k, v in value.items()]
    if isinstance(action, argparse._AppendAction):
        return [f"{opt}={item}" for item in _items(value)]
    if action.nargs in ("+", "*"):
        return [opt, *map(str, _items(value))]
    if isinstance(value, list | tuple):  # --tasks a,b / --k 1,4,8
        value = ",".join(map(str, value))
    return [f"{opt}={value}"]


def _items(value: Any) -> list[str]:
    return [str(value)] if isinstance(value, str | Path) else [str(v) for v in value]


def _assignments(overrides: Mapping[str, Any] | Sequence[str] | str) -> list[str]:
    """`--set` assignments: `{"a.b": v}` as `a.b=<v as JSON, which YAML reads back>`."""
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return list(overrides)


def _json_lines(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """Each row as the JSON line `scalerl score` would read (objects JSON lacks as strings)."""
    for row in rows:
        yield json.dumps(row, default=str)


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a result mapping (the dataclasses holding it are frozen)."""
    return MappingProxyType(dict(value))
