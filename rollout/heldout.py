"""Held-out evaluation: unbiased pass@k and mean@n, per-task aggregation, and `evaluate()`.

`aggregate()` turns scored rollouts (`Rollout` objects or `scalerl generate` rows) into per-task
and overall figures; `evaluate()` generates on a task's held-out split and aggregates. The trainer's
`val/...` metrics and `scalerl eval` both go through these functions. No files, caching or plots
here (that is `scalerl/evaluation/report.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from scalerl.envs.base import STATUSES, Sample
from scalerl.envs.task import Task
from scalerl.rollout.admission import Lane
from scalerl.rollout.types import FINISH_REASONS, Budget, Rollout


class RowError(ValueError):
    """A rollout row that cannot be aggregated; the message names the field and what is valid."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one sample with `c` correct among `n` rollouts (Chen et al. 2021).

    1 - C(n-c, k) / C(n, k), computed as the numerically stable product
    1 - prod_{i=n-c+1}^{n} (1 - k/i) (their Fig. 3), never as max-over-n.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n} c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass(frozen=True)
class Record:
    """What aggregation needs from one scored rollout."""

    task: str
    sample_id: str
    status: str
    finish_reason: str | None = None
    length: int | None = None
    """Completion tokens (forced interruption tokens included)."""
    thinking_tokens: int | None = None
    answer_tokens: int | None = None
    interrupted: bool | None = None
    """Thinking was cut at its budget (None: not recorded, e.g. rows of another tool)."""
    turns: int | None = None
    """Assistant turns of a multi-turn rollout (None: a single-turn rollout)."""
    tool_calls: int | None = None
    tool_errors: int | None = None
    """Tool calls whose status was not `ok` (raised or timed out)."""
    credit: float | None = None
    """A graded verdict's credit in [0, 1] (`Score.reward`); None: all-or-nothing."""

    @property
    def correct(self) -> bool:
        return self.status == "correct"


def record_from_rollout(r: Rollout) -> Record:
    return Record(r.task, r.sample_id, r.score.status, r.finish_reason, len(r.token_ids),
                  r.thinking_tokens, r.answer_tokens, r.interrupted,
                  *_turn_counts([t.to_dict() for t in r.turns] or None, list(r.tool_calls)),
                  credit=r.score.reward)


def _turn_counts(turns: Any, calls: Any) -> tuple[int | None, int | None, int | None]:
    """(assistant turns, tool calls, failed tool calls) of a multi-turn rollout's `turns` and
    `tool_calls` (as `Rollout.to_row` writes them); Nones for a single-turn one (no turns)."""
    if turns is None:
        return None, None, None
    if not isinstance(turns, list) or not all(isinstance(t, Mapping) for t in turns):
        raise RowError("field 'turns' must be a list of objects (role, text, start, end)")
    calls = calls or []
    if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
        raise RowError("field 'tool_calls' must be a list of objects (name, code, status, ...)")
    return (sum(t.get("role") == "assistant" for t in turns), len(calls),
            sum(c.get("status") != "ok" for c in calls))


def _opt_int(row: Mapping[str, Any], key: str) -> int | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(f"field {key!r} must be a non-negative integer, got {value!r}")
    return value


def record_from_row(row: Mapping[str, Any]) -> Record:
    """A `Record` from one JSONL row; raises RowError naming the bad field."""
    if not isinstance(row, Mapping):
        raise RowError(f"expected a JSON object, got {type(row).__name__}")
    for key in ("task", "sample_id", "status"):
        if key not in row:
            raise RowError(f"missing field {key!r} (rows need task, sample_id, status)")
    task, sample_id, status = row["task"], row["sample_id"], row["status"]
    if not isinstance(task, str) or not task:
        raise RowError(f"field 'task' must be a non-empty string, got {task!r}")
    if not isinstance(sample_id, str | int) or isinstance(sample_id, bool):
        raise RowError(f"field 'sample_id' must be a string or integer, got {sample_id!r}")
    if status not in STATUSES:
        raise RowError(f"field 'status' is {status!r}; valid: {', '.join(STATUSES)}")
    finish = row.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise RowError(f"field 'finish_reason' is {finish!r}; valid: {', '.join(FINISH_REASONS)}")
    token_ids = row.get("token_ids")
    if token_ids is not None and not isinstance(token_ids, list):
        raise RowError(f"field 'token_ids' must be a list, got {type(token_ids).__name__}")
    interrupted = row.get("interrupted")
    if interrupted is not None and not isinstance(interrupted, bool):
        raise RowError(f"field 'interrupted' must be true or false, got {interrupted!r}")
    return Record(task, str(sample_id), status, finish,
                  len(token_ids) if token_ids is not None else None,
                  _opt_int(row, "thinking_tokens"), _opt_int(row, "answer_tokens"), interrupted,
                  *_turn_counts(row.get("turns"), row.get("tool_calls")),
                  credit=_credit(row))


def _credit(row: Mapping[str, Any]) -> float | None:
    value = row.get("credit")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise RowError(f"field 'credit' must be a number in [0, 1], got {value!r}")
    return float(value)


def to_records(items: Iterable[Rollout | Mapping[str, Any] | Record]) -> list[Record]:
    out = []
    for item in items:
        if isinstance(item, Record):
            out.append(item)
        elif isinstance(item, Rollout):
            out.append(record_from_rollout(item))
        else:
            out.append(record_from_row(item))
    return out


@dataclass(frozen=True)
class TaskResult:
    """Figures for one task (or `overall`: all samples of all tasks pooled, each weighing one)."""

    name: str
    samples: int
    rollouts: int
    n_min: int
    n_max: int
    pass_at: dict[int, float | None]
    """Mean unbiased pass@k over samples; None where some sample has fewer than k rollouts."""
    mean_at_n: float
    """Mean over samples of the sample's fraction of correct rollouts (mean@n)."""
    stderr: float | None
    """Standard error of mean@n over samples (None for a single sample)."""
    status_frac: dict[str, float]
    truncated_frac: float | None
    interrupted_frac: float | None
    mean_length: float | None
    mean_thinking_tokens: float | None
    mean_answer_tokens: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    truncated: int | None = None
    """Rollouts that ran out of a token budget (None: finish reasons not recorded)."""
    interrupted: int | None = None
    """Rollouts whose thinking was cut at its budget (forced interruption)."""
    turns_mean: float | None = None
    """Mean assistant turns per rollout (a single-turn rollout counts 1); None when no rollout
    is multi-turn (tools and feedback off)."""
    tool_calls_mean: float | None = None
    tool_error_frac: float | None = None
    """Tool calls that raised or timed out, over all tool calls (None: no tool call)."""
    credit_mean: float | None = None
    """Mean graded credit over the rollouts with one (`error` verdicts have none); None when the
    task's verdicts are all-or-nothing."""

    @property
    def mean_key(self) -> str:
        return f"mean@{self.n_min}" if self.n_min == self.n_max else "mean@n"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {f"pass@{k}": v for k, v in self.pass_at.items()}
        d[self.mean_key] = self.mean_at_n
        d["stderr"] = self.stderr
        d.update(samples=self.samples, rollouts=self.rollouts,
                 n=self.n_min if self.n_min == self.n_max else [self.n_min, self.n_max])
        d.update({f"{s}_frac": v for s, v in self.status_frac.items() if s != "correct"})
        d.update(truncated_frac=self.truncated_frac, interrupted_frac=self.interrupted_frac,
                 truncated=self.truncated, interrupted=self.interrupted,
                 mean_length=self.mean_length, mean_thinking_tokens=self.mean_thinking_tokens,
                 mean_answer_tokens=self.mean_answer_tokens)
        if self.turns_mean is not None:
            d.update(turns_mean=self.turns_mean, tool_calls_mean=self.tool_calls_mean,
                     tool_error_frac=self.tool_error_frac)
        if self.credit_mean is not None:
            d["credit_mean"] = self.credit_mean
        if self.notes:
            d["notes"] = list(self.notes)
        return d

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat numeric metrics under `prefix` (None values left out)."""
        keys = [f"pass@{k}" for k in self.pass_at] + [self.mean_key, "truncated_frac",
                                                       "interrupted_frac", "error_frac",
                                                       "timeout_frac", "mean_length",
                                                       "turns_mean", "tool_calls_mean",
                                                       "tool_error_frac", "credit_mean"]
        d = self.to_dict()
        return {f"{prefix}/{k}": float(d[k]) for k in keys if d.get(k) is not None}


@dataclass(frozen=True)
class EvalReport:
    tasks: dict[str, TaskResult]
    overall: TaskResult

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": {name: r.to_dict() for name, r in self.tasks.items()},
                "overall": self.overall.to_dict()}

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        """`{prefix}/{task}/pass@1`, ... per task and `{prefix}/pass@1`, ... overall."""
        out = self.overall.metrics(prefix)
        for name, r in self.tasks.items():
            out.update(r.metrics(f"{prefix}/{name}"))
        return out


def _mean_or_none(values: Sequence[int | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(values))


def _frac_or_none(records: Sequence[Record], reason: str) -> float | None:
    if any(r.finish_reason is None for r in records):
        return None
    return sum(r.finish_reason == reason for r in records) / len(records)


def _interrupted_frac(records: Sequence[Record]) -> float | None:
    """Rollouts whose thinking was cut at its budget, whatever their finish reason (rows without
    the flag: those that finished as `interrupted`)."""
    if any(r.interrupted is None for r in records):
        return _frac_or_none(records, "interrupted")
    return sum(bool(r.interrupted) for r in records) / len(records)


def summarize(name: str, records: Sequence[Record], ks: Sequence[int]) -> TaskResult:
    """Figures for one group of records (grouped by (task, sample_id) into samples)."""
    if not records:
        raise ValueError(f"{name}: no rollouts to aggregate")
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.task, r.sample_id)].append(r)
    ns = np.array([len(g) for g in groups.values()])
    cs = np.array([sum(r.correct for r in g) for g in groups.values()])
    n_min, n_max = int(ns.min()), int(ns.max())
    pass_at: dict[int, float | None] = {}
    notes = []
    for k in ks:
        if k > n_min:
            pass_at[k] = None
            notes.append(f"pass@{k} needs >= {k} rollouts per sample; the fewest here is {n_min}")
        else:
            pass_at[k] = float(np.mean([pass_at_k(int(n), int(c), k)
                                        for n, c in zip(ns, cs, strict=True)]))
    status_frac = {s: sum(r.status == s for r in records) / len(records) for s in STATUSES}
    truncated_frac, interrupted_frac = _frac_or_none(records, "truncated"), _interrupted_frac(
        records)
    return TaskResult(
        name=name, samples=len(groups), rollouts=len(records), n_min=n_min, n_max=n_max,
        pass_at=pass_at, mean_at_n=float(np.mean(cs / ns)),
        stderr=float(np.std(cs / ns, ddof=1) / np.sqrt(len(ns))) if len(ns) > 1 else None,
        status_frac=status_frac,
        truncated_frac=truncated_frac, interrupted_frac=interrupted_frac,
        mean_length=_mean_or_none([r.length for r in records]),
        mean_thinking_tokens=_mean_or_none([r.thinking_tokens for r in records]),
        mean_answer_tokens=_mean_or_none([r.answer_tokens for r in records]),
        notes=tuple(notes), truncated=_count(records, truncated_frac),
        interrupted=_count(records, interrupted_frac), **_turn_figures(records),
        credit_mean=_credit_mean(records))


def _credit_mean(records: Sequence[Record]) -> float | None:
    credits = [r.credit for r in records if r.credit is not None]
    return float(np.mean(credits)) if credits else None


def _turn_figures(records: Sequence[Record]) -> dict[str, float | None]:
    """Mean turns and tool calls per rollout and the failed calls' share, when any rollout is
    multi-turn (a single-turn rollout among them: 1 turn, no call)."""
    if all(r.turns is None for r in records):
        return {}
    calls = sum(r.tool_calls or 0 for r in records)
    return {"turns_mean": float(np.mean([r.turns or 1 for r in records])),
            "tool_calls_mean": calls / len(records),
            "tool_error_frac": (sum(r.tool_errors or 0 for r in records) / calls
                                if calls else None)}


def _count(records: Sequence[Record], frac: float | None) -> int | None:
    """A fraction of `records` back as a count (None stays None)."""
    return None if frac is None else round(frac * len(records))


def aggregate(items: Iterable[Rollout | Mapping[str, Any] | Record],
              ks: Sequence[int] = (1,)) -> EvalReport:
    """Per-task and overall figures of scored rollouts (`Rollout`s, JSONL rows or Records)."""
    if any(k < 1 for k in ks):
        raise ValueError(f"k must be >= 1, got {list(ks)}")
    records = to_records(items)
    if not records:
        raise ValueError("no rollouts to aggregate")
    by_task: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_task[r.task].append(r)
    tasks = {name: summarize(name, by_task[name], ks) for name in sorted(by_task)}
    return EvalReport(tasks=tasks, overall=summarize("overall", records, ks))


class SupportsGenerate(Protocol):
    def generate(self, samples: Sequence[Sample], *, n: int, budget: Budget,
                 temperature: float, seed: int | None, top_p: float = 1.0,
                 lane: Lane | None = None) -> list[Rollout]: ...


def eval_samples(task: Task, split: str = "test", limit: int | None = None) -> list[Sample]:
    """The held-out samples evaluated: the whole split, or `limit` of them evenly spaced.

    Evenly spaced (index `i * len // limit`), not the first `limit`: tasks list their samples by
    level or source (arith: 50 add2, then 50 add3, ...), and a prefix would measure only the
    first levels. Deterministic, and the same subset for `scalerl eval` and the trainer.
    """
    task.check_split(split)
    samples = list(task.samples(split))
    if not samples:
        raise ValueError(f"task {task.name!r} has no samples in split {split!r}")
    if limit is None or limit >= len(samples):
        return samples
    return [samples[i * len(samples) // limit] for i in range(limit)]


def evaluate(generator: SupportsGenerate, tasks: Sequence[Task], *, n: int,
             budget: Budget, split: str = "test", ks: Sequence[int] = (1,),
             temperature: float = 1.0, seed: int | None = 0,
             limit: int | None = None, lane: Lane | None = None) -> EvalReport:
    """Generate `n` rollouts per held-out sample of each task and aggregate them (`lane`: the
    bound on their share of each engine, rollout/admission.py; None: no bound).

    The trainer's validation logs `evaluate(...).metrics("val")`; `scalerl eval` runs the same
    sample selection, generation call and `aggregate` (adding a cache around the generation).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    samples = [s for t in tasks for s in eval_samples(t, split, limit)]
    bounded = {} if lane is None else {"lane": lane}
    rollouts = generator.generate(samples, n=n, budget=budget, temperature=temperature,
                                  seed=seed, **bounded)
    return aggregate(rollouts, ks)
