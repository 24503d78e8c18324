"""The training console: one progress bar with the key figures and a compact line per validation.

On a terminal: a rich progress bar (step, reward, last held-out pass@1 per task, generation
tokens/s, ETA) that never wraps, and a line per validation. Elsewhere (a log file, CI): one line
of at most 80 columns per step. Metrics come in already computed (trainer/metrics.py writes them);
nothing here writes files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

WIDTH = 80
"""Most columns a plain per-step line takes."""
ERROR_SHOWN = 0.05
"""A task's held-out `error` share above which its validation figure says so."""


def si(value: float) -> str:
    """3 significant figures with a k/M suffix: 1059 -> '1.06k'."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def heldout(metrics: Mapping[str, Any]) -> dict[str, float]:
    """task -> held-out pass@1 from a validation's metrics (`val/<task>/pass@1`)."""
    return {k.split("/")[1]: v for k, v in metrics.items()
            if k.startswith("val/") and k.endswith("/pass@1") and k.count("/") == 2}


def bar_figures(metrics: Mapping[str, Any], last_heldout: Mapping[str, float]) -> str:
    """What the progress bar shows after a step: reward, held-out pass@1 per task, tokens/s."""
    parts = []
    if _finite(metrics.get("reward/mean")):
        parts.append(f"reward {metrics['reward/mean']:+.2f}")
    if last_heldout:  # 0.281 -> .28: the bar has 80 columns for everything
        parts.append(" ".join(f"{t} {p:.2f}".replace(" 0.", " .") for t, p in
                              last_heldout.items()))
    if _finite(metrics.get("rollout/tokens_per_s")):
        parts.append(f"{si(metrics['rollout/tokens_per_s'])} tok/s")
    return " · ".join(parts)


def step_line(step: int, total: int, metrics: Mapping[str, Any]) -> str:
    """One step as a plain line of at most WIDTH columns (consoles that are not terminals)."""
    shown = [("reward", "reward/mean", "+.3f"), ("loss", "loss/value", ".3g"),
             ("ent", "policy/entropy", ".3g"), ("trunc", "rollout/truncated_frac", ".2f"),
             ("err", "batch/error_excluded_frac", ".2f")]
    parts = [f"{name} {metrics[key]:{fmt}}" for name, key, fmt in shown
             if _finite(metrics.get(key))]
    if _finite(metrics.get("rollout/tokens_per_s")):
        parts.append(f"{si(metrics['rollout/tokens_per_s'])} tok/s")
    line = f"step {step}/{total}"
    for part in parts:  # whole figures only: one that does not fit is left out
        if len(line) + 1 + len(part) <= WIDTH:
            line = f"{line} {part}"
    return line


def validation_line(step: int, metrics: Mapping[str, Any]) -> str:
    """`held-out step N (S s): task pass@1 ...`, with the error share of tasks that had many."""
    parts = []
    for task, value in heldout(metrics).items():
        errors = metrics.get(f"val/{task}/error_frac", 0.0)
        note = f" ({errors:.0%} verifier errors)" if errors > ERROR_SHOWN else ""
        parts.append(f"{task} {value:.3f}{note}")
    seconds = metrics.get("val/seconds")
    took = f" ({seconds:.0f} s)" if _finite(seconds) else ""
    return f"held-out step {step}{took}: " + "  ".join(parts)


class StepConsole:
    """The progress bar (terminal) or plain step lines (anything else)."""

    def __init__(self, total_steps: int, start_step: int = 0):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
        from rich.table import Column

        self.console = Console()
        self.total = total_steps
        self.last_heldout: dict[str, float] = {}
        self._last_step: Mapping[str, Any] = {}
        self._progress = None
        if self.console.is_terminal:
            figures = TextColumn("{task.fields[figures]}",
                                 table_column=Column(no_wrap=True, overflow="ellipsis"))
            self._progress = Progress(
                TextColumn("{task.completed:.0f}/{task.total:.0f}"), BarColumn(bar_width=8),
                figures, TextColumn("ETA"), TimeRemainingColumn(compact=True),
                console=self.console, transient=False)
            self._task = self._progress.add_task("train", total=total_steps,
                                                 completed=start_step, figures="")
            self._progress.start()

    def step(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self._progress is None:
            self.console.print(step_line(step, self.total, metrics), markup=False,
                               highlight=False, soft_wrap=True)
            return
        self._last_step = metrics
        self._progress.update(self._task, completed=step,
                              figures=bar_figures(metrics, self.last_heldout))

    def validation(self, step: int, metrics: Mapping[str, Any]) -> None:
        self.last_heldout = heldout(metrics)
        self.print(validation_line(step, metrics))
        if self._progress is not None:
            self._progress.update(self._task, figures=bar_figures(self._last_step,
                                                                  self.last_heldout))

    def print(self, text: str) -> None:
        """A line with rich markup, above the bar when there is one."""
        self.console.print(text, highlight=False)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
