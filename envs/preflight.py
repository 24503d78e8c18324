"""The preflight of `train`, `eval` and `generate`: can every task's verifier work on this machine?

Each task answers for itself with the run's grading settings (`Task.preflight(grading)`: its
kind's check, e.g. a code task needs the run's sandbox backend to work, unless the task declares
needs of its own). This runs before any engine or model is started, so a run that could only
score `error` stops at once with one line per task naming what is missing and the fix. It starts
no engine and scores nothing; `scalerl doctor` is the machine-wide report.
"""

from __future__ import annotations

from collections.abc import Iterable

from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.task import Task

PREFLIGHT_EXIT = 3
"""Exit code of a command whose preflight failed (this machine cannot verify a task)."""


class PreflightError(RuntimeError):
    """A task's verifier cannot work here; the message is one line per task."""

    def lines(self, command: str) -> str:
        """The message as printed by `scalerl COMMAND`: every line prefixed with the command."""
        return "\n".join(f"scalerl {command}: {line}" for line in str(self).splitlines())


def task_problems(tasks: Iterable[Task], grading: Grading = DEFAULT_GRADING) -> list[str]:
    """One line per task whose verifier cannot work here (a raising check counts as one)."""
    problems = []
    for task in tasks:
        try:
            problem = task.preflight(grading)
        except Exception as exc:  # a broken check is reported, never a crash mid-start-up
            problem = f"its preflight raised {type(exc).__name__}: {exc}"
        if problem:
            problems.append(f"task {task.name!r} cannot be verified here: {problem}")
    return problems


def check_tasks(tasks: Iterable[Task], grading: Grading = DEFAULT_GRADING) -> None:
    """Raise PreflightError listing every task whose verifier cannot work on this machine with
    the run's `grading` settings."""
    problems = task_problems(tasks, grading)
    if problems:
        raise PreflightError("\n".join(problems))
