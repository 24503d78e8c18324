"""The report files of `scalerl eval`: results.json, results.md and results.png.

results.md opens with the protocol and every sampling setting (per task: n, temperature, top-p,
budgets), then per checkpoint one row per benchmark: pass@1 ± its standard error, pass@k for the
other ks asked, truncated and interrupted shares (with counts) and the sample count; with several
checkpoints a comparison (one row per checkpoint) and a plot of pass@k against step; and, when
training tasks are known, the contamination counts per benchmark. Formatting only: the figures
come from scalerl/evaluation/report.py and rollout/heldout.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def mean_key(d: dict[str, Any]) -> str:
    """The key of a results dict's mean@n figure (`mean@<n>`; `mean@n` when there is none)."""
    return next((k for k in d if k.startswith("mean@")), "mean@n")


def _with_count(frac: float | None, count: int | None) -> str:
    return "-" if frac is None else f"{frac:.3f}" + (f" ({count})" if count is not None else "")


def _pass1(d: dict[str, Any]) -> str:
    mean, se = d[mean_key(d)], d.get("stderr")
    return f"{mean:.3f} ± {se:.3f}" if se is not None else f"{mean:.3f}"


TURN_COLUMNS = {"credit_mean": "mean credit", "turns_mean": "turns",
                "tool_calls_mean": "tool calls", "tool_error_frac": "tool errors"}
"""Graded and multi-turn figures (rollout/heldout.py), shown only when some task in the table
has them: the mean credit of graded verdicts beside pass@k, then turns and tool calls."""


def task_table(report: dict[str, Any], ks: Sequence[int]) -> list[str]:
    """Markdown rows: one per task and one overall."""
    cols = [f"pass@{k}" for k in ks if k != 1]
    rows = [*report["tasks"].items(), ("**overall**", report["overall"])]
    turns = [c for c in TURN_COLUMNS if any(d.get(c) is not None for _, d in rows)]
    head = ["task", "samples", "n", "pass@1 ± s.e.", *cols, "truncated", "interrupted", "error",
            "timeout", "mean length", *[TURN_COLUMNS[c] for c in turns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, d in rows:
        cells = [name, _fmt(d["samples"]), _fmt(d["n"]), _pass1(d),
                 *[_fmt(d.get(c)) for c in cols],
                 _with_count(d["truncated_frac"], d.get("truncated")),
                 _with_count(d["interrupted_frac"], d.get("interrupted")),
                 _fmt(d.get("error_frac")), _fmt(d.get("timeout_frac")), _fmt(d["mean_length"]),
                 *[_fmt(d.get(c)) for c in turns]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def comparison_table(results: dict[str, Any]) -> list[str]:
    """Markdown rows: one per checkpoint, pass@k (first k) per task and overall."""
    k = results["settings"]["ks"][0]
    tasks = results["settings"]["tasks"]
    head = ["model", "step", *[f"{t} pass@{k}" for t in tasks], f"overall pass@{k}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in results["models"]:
        cells = [e["label"], e["step"], *[e["tasks"].get(t, {}).get(f"pass@{k}") for t in tasks],
                 e["overall"].get(f"pass@{k}")]
        lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
    return lines


def settings_lines(s: dict[str, Any]) -> list[str]:
    """The protocol and every sampling setting, per task."""
    protocol = s.get("protocol") or "custom"
    lines = [f"Protocol **{protocol}**: temperature {s['temperature']}, top-p {s.get('top_p', 1.0)}"
             f", seed {s['seed']}, prompt style `{s.get('prompt', 'task')}`"
             + (f", {s['limit']} evenly spaced samples per task" if s["limit"] else "") + ".", "",
             tools_line(s.get("tools")), "",
             "| task | n | thinking budget | answer budget | max tokens |", "|---|---|---|---|---|"]
    for t in s["tasks"]:
        b = s["budgets"][t]
        lines.append(f"| {t} | {s.get('n_by_task', {}).get(t, s['n'])} | {_fmt(b['thinking'])} "
                     f"| {b['answer']} | {_fmt(b['total'])} |")
    lines += [""] + [f"- {n}" for n in s.get("notes", [])]
    return lines


def tools_line(tools: dict[str, Any] | None) -> str:
    """Whether the tasks were given a tool (`--tools`), and how."""
    if not tools:
        return ("Tools: off (each task as registered; a task with an environment of its own is "
                "multi-turn, see its turns).")
    return (f"Tools: **{tools['tool']}** on every task, sandboxed, up to {tools['max_turns']} "
            f"assistant turns, calls written in the `{tools['format']}` convention.")


def contamination_lines(c: dict[str, Any] | None) -> list[str]:
    from scalerl.evaluation.contamination import NGRAM

    if not c:
        return ["## Contamination", "", "No training tasks known (evaluate a run directory, or "
                "give --train-tasks NAMES): not checked.", ""]
    skipped = [f"- not checked against {line}" for line in c.get("skipped", [])]
    if not c["train_tasks"]:
        return ["## Contamination", "", *skipped, ""]
    lines = ["## Contamination", "", *skipped, f"Benchmark problems also in the training tasks "
             f"({', '.join(c['train_tasks'])}): same normalised prompt, or a shared {NGRAM}-word "
             f"run.", "", f"| benchmark | problems | same prompt | {NGRAM}-gram | contaminated | "
             "examples |", "|---|---|---|---|---|---|"]
    for name, row in c["benchmarks"].items():
        lines.append(f"| {name} | {row['problems']} | {row['exact']} | {row[f'ngram{NGRAM}']} | "
                     f"{row['contaminated']} | {', '.join(row['examples']) or '-'} |")
    return lines + [""]


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [f"# Evaluation: {', '.join(s['tasks'])} ({s['split']} split)", "",
             *settings_lines(s),
             "pass@1 is the mean over samples of the fraction of correct rollouts, ± its standard "
             "error over samples; pass@k is the unbiased estimator (Chen et al. 2021).", ""]
    if len(results["models"]) > 1:
        lines += ["## Comparison", "", *comparison_table(results), "",
                  "![pass@k against step](results.png)", ""]
    for e in results["models"]:
        lines += [f"## {e['label']}", "", f"`{e['model']}`: {e['generated_samples']} samples "
                  f"generated, {e['cached_samples']} from the cache, {e['seconds']:.1f} s.", "",
                  *task_table(e, s["ks"]), ""]
        parts = [*e["tasks"].values(), e["overall"]]
        notes = sorted({n for d in parts for n in d.get("notes", [])})
        lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    if "contamination" in results:
        lines += contamination_lines(results["contamination"])
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    """pass@k (first k) per task and overall against step (or checkpoint index)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    k = results["settings"]["ks"][0]
    entries = results["models"]
    use_step = all(e["step"] is not None for e in entries)
    xs = [e["step"] if use_step else i for i, e in enumerate(entries)]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    tasks = results["settings"]["tasks"]
    series = [(t, [e["tasks"].get(t, {}) for e in entries], {"marker": "o"}) for t in tasks]
    if len(tasks) > 1:
        series.append(("overall", [e["overall"] for e in entries],
                       {"marker": "s", "color": "black", "lw": 2}))
    for name, ds, style in series:
        ys = [d.get(f"pass@{k}") for d in ds]
        err = [d.get("stderr") or 0.0 for d in ds] if k == 1 else None
        ax.errorbar(xs, [np.nan if y is None else y for y in ys], yerr=err, capsize=3,
                    label=name, **style)
    ax.set_xlabel("step" if use_step else "checkpoint")
    if not use_step:
        ax.set_xticks(xs, [e["label"] for e in entries], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"pass@{k} ({results['settings']['split']} split)")
    protocol = results["settings"].get("protocol") or "custom"
    ax.set_title(f"held-out pass@{k}, protocol {protocol}"
                 + (" (bars: +-1 standard error over samples)" if k == 1 else ""), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(results: dict[str, Any], out_dir: Path) -> None:
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    (out_dir / "results.md").write_text(markdown(results))
    if len(results["models"]) > 1:
        plot(results, out_dir / "results.png")
