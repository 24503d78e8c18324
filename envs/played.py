"""A task played with an environment it does not have itself: `PlayedTask` and `with_tools`.

`PlayedTask(inner, environment, note, system_suffix)` is `inner` under its own name (so its
family's prompts, protocols and grading stay), with its samples, judge, verifier options, data
settings (`with_data`, `with_revision` keep the environment) and `environment` set; `note` is
added to its source line (`scalerl tasks list`), `system_suffix` to its system prompt.
`with_tools(task)` is the tool-integrated variant of any task (`--tools python` on `eval` and
`generate`): the `python` environment, and the plain convention's instruction appended to the
system prompt (a chat-template model also gets the template's own tools block). Test feedback's
wrapper (envs/code/feedback.py `FeedbackTask`) is one of these. Nothing here runs a tool or a
test.
"""

from __future__ import annotations

from typing import Any

from scalerl.envs.base import Sample
from scalerl.envs.environment import Environment
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.task import Task

TOOLS = ("python",)
"""The tools `with_tools` offers."""
TOOL_INSTRUCTION = ("You may run Python: write code in a ```python block, close it with ```, "
                    "then write ```output and its output will be shown.")
"""The plain convention's instruction (envs/tool_format.py `plain`), as arith_tool's prompt
says it."""


class PlayedTask(Task):
    """`inner` played with `environment` (see the module docstring)."""

    def __init__(self, inner: Task, environment: Environment, note: str = "",
                 system_suffix: str | None = None) -> None:
        self.inner, self.environment = inner, environment
        self.note, self.system_suffix = note, system_suffix
        self.name, self.kind, self.splits = inner.name, inner.kind, inner.splits
        self.options, self.requires_thinking = inner.options, inner.requires_thinking
        self.declared_sizes, self.revision = inner.declared_sizes, inner.revision
        self.source = "; ".join(p for p in (inner.source, note) if p)

    @property
    def system_prompt(self) -> str | None:  # type: ignore[override]
        parts = [p for p in (self.inner.system_prompt, self.system_suffix) if p]
        return "\n\n".join(parts) or None

    @property
    def duplicates(self) -> int:  # type: ignore[override]
        return self.inner.duplicates

    @property
    def skipped(self) -> Any:  # type: ignore[override]
        return self.inner.skipped

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        return {split: self.inner.samples(split) for split in self.inner.splits}

    def judge(self, sample: Sample, completion: str, grading: Grading) -> Any:
        return self.inner.judge(sample, completion, grading)

    def verifier_options(self) -> dict[str, Any]:
        return self.inner.verifier_options()

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        return self.inner.preflight(grading) or self.environment.preflight()

    def rewrap(self, inner: Task) -> PlayedTask:
        """The same environment around another inner task (its data or revision changed)."""
        return type(self)(inner, self.environment, self.note, self.system_suffix)

    def with_data(self, path: str) -> PlayedTask:
        return self.rewrap(self.inner.with_data(path))

    def with_revision(self, revision: str) -> PlayedTask:
        return self.rewrap(self.inner.with_revision(revision))


def with_tools(task: Task, tool: str = "python", max_turns: int = 4) -> PlayedTask:
    """`task` with the sandboxed `tool` between its turns, up to `max_turns` assistant turns.
    ValueError (one line) for an unknown tool or a task that already has an environment."""
    from scalerl.envs.python_env import PythonEnvironment

    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}; valid: {', '.join(TOOLS)}")
    if task.environment is not None:
        raise ValueError(f"task {task.name!r} already has an environment "
                         f"({type(task.environment).__name__}); --tools adds one to "
                         "single-turn tasks only")
    return PlayedTask(task, PythonEnvironment(max_turns=max_turns),
                      note=f"python tool, up to {max_turns} turns",
                      system_suffix=TOOL_INSTRUCTION)
