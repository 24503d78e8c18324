"""`scalerl eval --log-with A,B`: an evaluation's results sent to the experiment trackers.

One tracked run per `--out` directory (its trackers.json; evaluating into the same --out again
reopens it and sends only checkpoints past the last one sent). Each checkpoint is one step: its
training step (or its position, when a model has none or two share one), with
`eval/<task>/pass@k`, `eval/<task>/mean@n`, ... and the overall `eval/pass@k`, ...; the results
table (a row per checkpoint and task, and overall) comes with the last step. The trackers are
the trainer's (trainer/tracking.py, Accelerate's own); results.json stays the record. Nothing
here generates or aggregates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scalerl.evaluation.render import mean_key
from scalerl.trainer.trackers import TrackedRun
from scalerl.trainer.tracking import Tracking

FIGURES = ("samples", "n", "mean@n", "stderr", "truncated_frac", "interrupted_frac", "error_frac",
           "timeout_frac", "mean_length")
"""The figures of a task's results besides pass@k (mean@n stands for the `mean@<n>` key)."""


def figures(d: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """One task's (or the overall) figures by column name: pass@k, then FIGURES."""
    mean = mean_key(d)
    out = {f"pass@{k}": d.get(f"pass@{k}") for k in ks}
    return out | {name: d.get(mean if name == "mean@n" else name) for name in FIGURES}


def eval_metrics(entry: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """`eval/<task>/<figure>` for every task and `eval/<figure>` overall, of one checkpoint."""
    out = {f"eval/{k}": v for k, v in figures(entry["overall"], ks).items()}
    for task, d in entry["tasks"].items():
        out |= {f"eval/{task}/{k}": v for k, v in figures(d, ks).items()}
    return out


def results_table(entries: Sequence[dict[str, Any]], ks: Sequence[int]
                  ) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows): one row per checkpoint and task, and one overall per checkpoint."""
    columns = ["model", "step", "task", *[f"pass@{k}" for k in ks], *FIGURES]
    rows = []
    for e in entries:
        for task, d in [*e["tasks"].items(), ("overall", e["overall"])]:
            rows.append([e["label"], e["step"], task, *figures(d, ks).values()])
    return columns, rows


def steps_of(entries: Sequence[dict[str, Any]]) -> list[int]:
    """The tracker step of each entry (in order): its training step when every entry has one
    and they increase, else its position."""
    steps = [e["step"] for e in entries]
    if all(isinstance(s, int) for s in steps) and all(
            a < b for a, b in zip(steps, steps[1:], strict=False)):
        return steps
    return list(range(len(entries)))


def log_results(results: dict[str, Any], names: Sequence[str], run: TrackedRun,
                description: dict[str, Any]) -> Tracking:
    """Send `results` (run_eval's) to trackers `names`, in checkpoint step order."""
    ks = results["settings"]["ks"]
    entries = sorted(results["models"], key=lambda e: (e["step"] is None, e["step"] or 0))
    tracking = Tracking(names, run, {"eval": results["settings"], **description})
    steps = steps_of(entries)
    for i, (entry, step) in enumerate(zip(entries, steps, strict=True)):
        last = i == len(entries) - 1
        tables = {"eval/results": results_table(entries, ks)} if last else None
        tracking.log(step, eval_metrics(entry, ks), tables)
    tracking.finish()
    return tracking


def eval_run(out_dir: str | Path, project: str, run_name: str) -> TrackedRun:
    """The tracked run of an evaluation written to `out_dir`."""
    return TrackedRun(project=project, run_name=run_name, tags=("eval",), run_dir=Path(out_dir))


def tracker_names(text: str) -> tuple[str, ...]:
    """`--log-with a,b` -> names, each one of Accelerate's trackers (ValueError otherwise)."""
    from scalerl.trainer.trackers import TRACKERS

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in TRACKERS]
    if unknown or not names:
        raise ValueError(f"--log-with {text!r}: allowed: {', '.join(TRACKERS.names())}")
    return names
