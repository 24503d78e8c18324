"""Rollout samples for people to read: N rollouts per task of one step, as table rows and files.

`sample_rows` picks `per_task` rollouts of each task from a step's groups (one per prompt before a
second of any, in the step's order) and gives each its prompt and completion text, verdict,
graded credit (None: all-or-nothing), reward (the one trainer/rewards.py assigned it, None for
an `error` verdict or a dropped truncation), finish reason, thinking/answer tokens, policy
version and lag. `write_samples` puts them in `<run-dir>/samples/step_NNNNNN.jsonl`, one file
per step, so a step's samples are never overwritten by a later step's. Sending them to the
trackers is trainer/metrics.py's."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scalerl.rollout.buffer import rollout_lag
from scalerl.rollout.types import Rollout
from scalerl.trainer.filters import Group

COLUMNS = ("step", "task", "sample_id", "group", "prompt", "completion", "status", "credit",
           "reward", "finish_reason", "thinking_tokens", "answer_tokens", "policy_version", "lag")
"""The columns of a samples table, in order."""
FOLDER = "samples"


def pick(groups: Sequence[Group], per_task: int) -> list[Rollout]:
    """`per_task` rollouts of each task: the first rollout of each of its prompts, then the
    second, ..., in the step's order (so a table shows as many prompts as it can)."""
    by_task: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        if g:
            by_task[g[0].task].append(g)
    out: list[Rollout] = []
    for task in sorted(by_task):
        task_groups = by_task[task]
        depth = max(len(g) for g in task_groups)
        ranked = [g[i] for i in range(depth) for g in task_groups if i < len(g)]
        out += ranked[:per_task]
    return out


def sample_rows(groups: Sequence[Group], rewarded: Sequence[Group], *, step: int,
                trainer_version: int, per_task: int,
                decode: Callable[[Sequence[int]], str]) -> list[dict[str, Any]]:
    """The rows of step `step`'s samples table (`COLUMNS`); `rewarded`: the step's rewarded
    groups (GroupReport.rewarded), whose rollouts carry their rewards; `trainer_version`: the
    policy version the step trained (the lag is counted from it to the oldest token's)."""
    rewards = {(r.task, r.sample_id, r.group): r.reward for g in rewarded for r in g}
    return [{"step": step, "task": r.task, "sample_id": r.sample_id, "group": r.group,
             "prompt": decode(r.prompt_token_ids), "completion": r.completion,
             "status": r.score.status, "credit": r.score.reward,
             "reward": rewards.get((r.task, r.sample_id, r.group)),
             "finish_reason": r.finish_reason, "thinking_tokens": r.thinking_tokens,
             "answer_tokens": r.answer_tokens,
             "policy_version": r.min_version if r.versions else None,
             "lag": rollout_lag(trainer_version, r)}
            for r in pick(groups, per_task)]


def samples_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / FOLDER / f"step_{step:06d}.jsonl"


def write_samples(run_dir: Path, step: int, rows: Sequence[dict[str, Any]]) -> Path:
    """`samples/step_NNNNNN.jsonl` (replacing only the same step's file: a step a resumed run
    took again)."""
    path = samples_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)
    return path


def truncate_samples(run_dir: Path, last_step: int) -> None:
    """Remove the samples of steps after `last_step` (a killed run's steps past its checkpoint,
    which the resumed run takes again)."""
    folder = Path(run_dir) / FOLDER
    for path in folder.glob("step_*.jsonl") if folder.is_dir() else ():
        try:
            step = int(path.stem[len("step_"):])
        except ValueError:
            continue
        if step > last_step:
            path.unlink()


def as_table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows as lists), what a tracker's table takes."""
    return list(COLUMNS), [[row[c] for c in COLUMNS] for row in rows]
