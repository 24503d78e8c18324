"""Evaluation reports for `scalerl eval`: checkpoints in, results.json / results.md / plot out.

Adds what the trainer's validation does not need: resolving checkpoints (paths or a run's
`checkpoints/`), the settings of a protocol (per-task n and budgets, top-p) and a per-(model,
task, sample, seed, sampling settings) rollout cache so a rerun after an interruption generates
only what is missing. Sample selection, generation call and estimators are
`scalerl.rollout.heldout`'s, unchanged; the Markdown tables and the plot are
`scalerl.evaluation.render`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.envs.base import dumps
from scalerl.envs.task import Task
from scalerl.evaluation.render import task_table, write_report  # noqa: F401 - part of this API
from scalerl.models import TINY_MODELS, resolve_model
from scalerl.rollout.heldout import (
    EvalReport,
    Record,
    RowError,
    SupportsGenerate,
    aggregate,
    eval_samples,
    record_from_row,
)
from scalerl.rollout.model_files import ModelNotFoundError
from scalerl.rollout.types import Budget


class EvalInputError(ValueError):
    """Bad input to `scalerl eval`; the message is one line naming the input."""


def read_rollout_records(path: str | Path) -> list[Record]:
    """Records of a scored-rollouts JSONL file (`scalerl generate` output qualifies)."""
    path = Path(path)
    if not path.is_file():
        raise EvalInputError(f"{path}: no such file (expected scored rollouts, one JSON per line)")
    records = []
    with path.open() as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                records.append(record_from_row(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise EvalInputError(f"{path} line {i}: not JSON ({exc.msg})") from None
            except RowError as exc:
                raise EvalInputError(f"{path} line {i}: {exc}") from None
    if not records:
        raise EvalInputError(f"{path}: no rollouts (the file is empty)")
    return records


# ------------------------------------------------------------------------------- checkpoints

STEP_RE = re.compile(r"step[-_]?(\d+)$")


@dataclass(frozen=True)
class ModelRef:
    path: str
    step: int | None
    label: str


def _step_of(path: Path) -> int | None:
    m = STEP_RE.search(path.name)
    return int(m.group(1)) if m else None


def _checkpoint_dirs(folder: Path) -> list[Path]:
    subs = [p for p in folder.iterdir() if p.is_dir() and _step_of(p) is not None]
    return sorted(subs, key=_step_of)


def lora_checkpoint(path: Path) -> bool:
    """Whether `path` is a LoRA run's checkpoint (`adapter/adapter_config.json`: evaluated as
    its base model with the adapter, scalerl/commands/engine_args.py `start_generator`)."""
    return (path / "adapter" / "adapter_config.json").is_file()


def resolve_models(paths: Sequence[str]) -> list[ModelRef]:
    """Model paths, with a run dir or a `checkpoints/` folder expanded to its step-N dirs (a
    LoRA run's checkpoints too: `lora_checkpoint`)."""
    refs: list[ModelRef] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and (p / "checkpoints").is_dir():
            p = p / "checkpoints"
        if p.is_dir() and not (p / "config.json").exists() and not lora_checkpoint(p):
            steps = _checkpoint_dirs(p)
            if not steps:
                raise EvalInputError(f"{raw}: neither a model (no config.json) nor a folder of "
                                     "step-N checkpoints")
            refs += [ModelRef(str(s), _step_of(s), f"{s.parent.name}/{s.name}") for s in steps]
        elif p.exists():
            refs.append(ModelRef(str(p), _step_of(p), p.name))
        elif raw.startswith((".", "/", "~")) or (raw not in TINY_MODELS and raw.count("/") != 1):
            raise EvalInputError(f"{raw}: no such model directory (give a local HF model dir, a "
                                 "run dir, its checkpoints/ folder, a hub id org/name, or tiny)")
        else:  # a tiny model, or a hub id's snapshot in the HF cache: the one resolver (models.py)
            try:
                refs.append(ModelRef(resolve_model(raw), None, raw))
            except ModelNotFoundError as exc:
                raise EvalInputError(str(exc)) from None
    return refs


def model_key(path: str) -> str:
    """Cache key of a model: its resolved path plus every file's name, size and mtime."""
    p = Path(path)
    h = hashlib.sha256()
    if not p.exists():
        h.update(path.encode())
        return h.hexdigest()[:16]
    h.update(str(p.resolve()).encode())
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(p)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------ cache

@dataclass(frozen=True)
class EvalSettings:
    """What a `--model` evaluation samples and reports (the protocol's settings, flags applied)."""

    tasks: tuple[str, ...]
    split: str = "test"
    n: int = 8
    """Rollouts per sample of a task not in `n_by_task`."""
    ks: tuple[int, ...] = (1, 4, 8)
    temperature: float = 1.0
    seed: int = 0
    budget: Budget = Budget()
    """The length budget of every task not named in `budgets`."""
    budgets: tuple[tuple[str, Budget], ...] = ()
    """Per-task budgets (task name, Budget), e.g. a training run's own."""
    limit: int | None = None
    top_p: float = 1.0
    """Nucleus sampling mass (an evaluation protocol's, e.g. R1's 0.95)."""
    n_by_task: tuple[tuple[str, int], ...] = ()
    """Per-task rollouts per sample (task name, n), e.g. a run's own per-task n."""
    protocol: str = ""
    """The protocol these settings come from (`--protocol`), recorded in the report."""
    notes: tuple[str, ...] = ()
    """What the report should say about the settings (e.g. a budget cut to fit the context)."""
    prompt: str = "task"
    """The prompt style samples are put with (scalerl/evaluation/prompts.py; `task`: each
    task's own), recorded in the report and part of the cache key."""
    tools: str | None = None
    """The tool every task was given (`--tools python`: tool-integrated), None: the tasks as
    registered (a task with an environment of its own is multi-turn either way)."""
    max_turns: int | None = None
    tool_format: str = "auto"
    """How tool calls are written (auto | chat | plain), part of the cache key with tools."""

    def budget_for(self, task: str) -> Budget:
        return dict(self.budgets).get(task, self.budget)

    def n_for(self, task: str) -> int:
        return dict(self.n_by_task).get(task, self.n)

    def sampling(self, task: str) -> dict[str, Any]:
        """What a cached rollout of `task` depends on, besides the model and the sample: every
        field of its Budget (derived from the dataclass, so a new field joins the key)."""
        key = {"split": self.split, "n": self.n_for(task), "temperature": self.temperature,
               "top_p": self.top_p, "seed": self.seed,
               "budget": dataclasses.asdict(self.budget_for(task))}
        if self.prompt != "task":  # the tasks' own prompts keep the keys they always had
            key["prompt"] = self.prompt
        if self.tools is not None:  # so do runs without --tools
            key["tools"] = {"tool": self.tools, "max_turns": self.max_turns,
                            "format": self.tool_format}
        return key

    def key(self, task: str) -> str:
        return hashlib.sha256(dumps(self.sampling(task)).encode()).hexdigest()[:12]

    def summary(self) -> dict[str, Any]:
        """The settings as written to results.json: the protocol and every sampling setting,
        per task."""
        return {"protocol": self.protocol, "prompt": self.prompt, "tasks": list(self.tasks),
                "ks": list(self.ks),
                "limit": self.limit, "split": self.split, "n": self.n,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed,
                "n_by_task": {t: self.n_for(t) for t in self.tasks},
                "budgets": {t: dataclasses.asdict(self.budget_for(t)) for t in self.tasks},
                "tools": None if self.tools is None else {
                    "tool": self.tools, "max_turns": self.max_turns, "format": self.tool_format},
                "notes": list(self.notes)}


class RolloutCache:
    """`DIR/cache/<model key>/<settings key>/<task>.jsonl`: scored rollout rows, appended."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, model: str, settings: EvalSettings, task: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", task)
        return self.root / model_key(model) / settings.key(task) / f"{safe}.jsonl"

    def load(self, model: str, settings: EvalSettings, task: str) -> dict[str, list[dict]]:
        """sample_id -> its n rows, for samples with all n groups cached (torn lines skipped)."""
        path = self.path(model, settings, task)
        by_sample: dict[str, dict[int, dict]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a write cut by an interruption: regenerate it
                    continue
                by_sample.setdefault(str(row["sample_id"]), {})[int(row["group"])] = row
        n = settings.n_for(task)
        return {sid: [g[i] for i in range(n)] for sid, g in by_sample.items()
                if all(i in g for i in range(n))}

    def append(self, model: str, settings: EvalSettings, task: str, rows: list[dict]) -> None:
        path = self.path(model, settings, task)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            meta = {"model": model, **settings.sampling(task)}
            (path.parent / "settings.json").write_text(json.dumps(meta, indent=1))
        torn = False
        if path.exists() and path.stat().st_size:
            with path.open("rb") as fh:
                fh.seek(-1, 2)
                torn = fh.read(1) != b"\n"
        with path.open("a") as fh:  # after a torn last line, start on a fresh one
            fh.write(("\n" if torn else "") + "".join(dumps(r) + "\n" for r in rows))
            fh.flush()


# ------------------------------------------------------------------------------- evaluation

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def eval_model(ref: ModelRef, settings: EvalSettings, cache: RolloutCache,
               make_generator: Callable[[str], SupportsGenerate], *, chunk: int = 64,
               tasks: Mapping[str, Task] | None = None) -> tuple[EvalReport, dict[str, Any]]:
    """Evaluate one model on `tasks` (the Task objects by name; None: the catalogue's, by the
    names in `settings`), generating only the samples the cache lacks; the engine is started
    (by `make_generator`) only if something is missing."""
    t0 = time.perf_counter()
    generator, rows, generated, cached = None, [], 0, 0
    for task in _tasks(settings, tasks):
        samples = eval_samples(task, settings.split, settings.limit)
        have = cache.load(ref.path, settings, task.name)
        missing = [s for s in samples if s.id not in have]
        cached += len(samples) - len(missing)
        n = settings.n_for(task.name)
        log(f"[{ref.label}] {task.name}: {len(samples)} samples, {len(samples) - len(missing)} "
            f"cached, {len(missing)} to generate (n={n})")
        for i in range(0, len(missing), chunk):
            if generator is None:
                generator = make_generator(ref.path)
            part = missing[i:i + chunk]
            out = generator.generate(part, n=n, budget=settings.budget_for(task.name),
                                     temperature=settings.temperature, seed=settings.seed,
                                     top_p=settings.top_p)
            new = [r.to_row() for r in out]
            cache.append(ref.path, settings, task.name, new)
            for r in new:
                have.setdefault(str(r["sample_id"]), []).append(r)
            generated += len(part)
            log(f"[{ref.label}] {task.name}: {i + len(part)}/{len(missing)} generated")
        rows += [r for s in samples for r in have[s.id]]
    report = aggregate(rows, settings.ks)
    info = {"generated_samples": generated, "cached_samples": cached,
            "seconds": time.perf_counter() - t0, "generator": generator}
    return report, info


def _tasks(settings: EvalSettings, tasks: Mapping[str, Task] | None) -> list[Task]:
    if tasks is None:
        from scalerl.envs.catalog import get_task

        return [get_task(name) for name in settings.tasks]
    return [tasks[name] for name in settings.tasks]


def task_data(tasks: Mapping[str, Task], split: str) -> dict[str, Any]:
    """Where each evaluated task's rows came from (its source and hub revision) and what their
    load left out (rows skipped as unusable, by reason; duplicates merged), read once."""
    out = {}
    for name, task in tasks.items():
        task.samples(split)  # loads the data (cached: the evaluation reuses it)
        skipped = task.skipped.by_reason() if task.skipped is not None else {}
        out[name] = {"source": task.source, "revision": task.revision, "skipped": skipped,
                     "merged": task.duplicates}
    return out


def data_lines(data: Mapping[str, Any]) -> list[str]:
    """`data: <task>: N rows skipped (...); M duplicate rows merged`, for tasks that had any."""
    lines = []
    for name, row in data.items():
        skipped = row["skipped"]
        notes = [f"{sum(skipped.values())} rows skipped ("
                 + "; ".join(f"{n} {r}" for r, n in skipped.items()) + ")"] if skipped else []
        notes += [f"{row['merged']} duplicate rows merged"] if row["merged"] else []
        if notes:
            lines.append(f"data: {name}: {'; '.join(notes)}")
    return lines


def run_eval(models: Sequence[ModelRef], settings: EvalSettings, out_dir: str | Path,
             make_generator: Callable[[str], SupportsGenerate], *,
             close: Callable[[Any], None] = lambda g: g.close(), chunk: int = 64,
             tasks: Mapping[str, Task] | None = None,
             contamination: dict[str, Any] | None = None,
             data: dict[str, Any] | None = None,
             on_report: Callable[[ModelRef, EvalReport], None] | None = None) -> dict[str, Any]:
    """Evaluate every model, write results.json, results.md (and results.png for several).
    `contamination` (scalerl/evaluation/contamination.py `report`, with the training tasks'
    names) is written beside the figures, and `data` (each task's source, hub revision, rows
    skipped and duplicates merged) beside them. `on_report` is handed each model's typed
    report as it is done (what `scalerl.api.evaluate` returns)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = RolloutCache(out_dir / "cache")
    entries = []
    for ref in models:
        report, info = eval_model(ref, settings, cache, make_generator, chunk=chunk, tasks=tasks)
        generator = info.pop("generator")
        if generator is not None:
            close(generator)
        if on_report is not None:
            on_report(ref, report)
        entries.append({"model": ref.path, "label": ref.label, "step": ref.step,
                        "model_key": model_key(ref.path), **info, **report.to_dict()})
    results = {"settings": settings.summary(), "models": entries,
               "contamination": contamination, "data": data}
    write_report(results, out_dir)
    return results
