"""Prompt styles of the evaluation protocols: how a benchmark's sample is put to the model.

A protocol names a style (`Protocol.prompt`); `PROMPT_STYLES` holds them by name:

- `task`: the task's own prompt and system prompt (what training uses).
- `r1`: DeepSeek-R1's published usage: no system prompt, every instruction in the user turn. A
  math problem is followed by "Please reason step by step, and put your final answer within
  \\boxed{}."; any other task's instruction (its system prompt) follows its prompt.
- `lcb`: LiveCodeBench's official chat prompt (envs/bench/lcb_prompt.py), for LiveCodeBench tasks
  only.

`prompted_tasks` wraps each task of an evaluation in a `PromptedTask` whose samples carry the
styled messages (and no system prompt of their own), so the generator renders exactly them; the
verdicts are the task's own. A style that cannot render a task says so before any engine starts.
It does not generate or grade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scalerl.envs.base import Sample, Score
from scalerl.envs.bench.lcb_prompt import lcb_messages
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.registry import family
from scalerl.envs.task import Task

R1_MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The directive DeepSeek-R1's usage recommendations put in the user turn of a math problem."""
TASK_STYLE = "task"
Messages = tuple[dict[str, str], ...]


@dataclass(frozen=True)
class PromptStyle:
    """One way of putting a sample to the model."""

    name: str
    """Key in PROMPT_STYLES (a protocol's `prompt`)."""
    description: str
    """One line for the docs and the report."""
    render: Callable[[Task, Sample], Messages] | None
    """(task, sample) -> the chat messages sent; None: the task's own prompt, unchanged."""
    accepts: Callable[[Task], str | None] = lambda task: None
    """None when the style can render `task`'s samples, else one line saying why not."""

    def __post_init__(self) -> None:
        if not self.name or not self.description:
            raise ValueError("a prompt style needs a name and a description")


def _turns(sample: Sample, system: str | None) -> tuple[list[str], list[dict[str, str]]]:
    """The system texts (the task's, then the sample's own) and the other messages."""
    messages = [dict(m) for m in sample.messages()]
    systems = [system] if system else []
    systems += [m["content"] for m in messages if m.get("role") == "system"]
    return systems, [m for m in messages if m.get("role") != "system"]


def _with_instruction(turns: list[dict[str, str]], instruction: str) -> Messages:
    """`turns` with `instruction` after the last user turn's text."""
    last = max(i for i, m in enumerate(turns) if m.get("role") == "user")
    turns[last] = {**turns[last], "content": f"{turns[last]['content']}\n{instruction}"}
    return tuple(turns)


def r1_messages(task: Task, sample: Sample) -> Messages:
    """DeepSeek-R1's usage: no system message; a math problem ends with R1_MATH_INSTRUCTION, any
    other task's instructions (its system prompt) follow its prompt in the user turn."""
    systems, turns = _turns(sample, task.system_prompt)
    if task.kind == "math":
        return _with_instruction(turns, R1_MATH_INSTRUCTION)
    if not systems:
        return tuple(turns)
    return _with_instruction(turns, "\n" + "\n\n".join(systems))


def lcb_task_messages(task: Task, sample: Sample) -> Messages:
    """LiveCodeBench's own system message and `### Question / ### Format / ### Answer` turn,
    from the problem statement and its starter code."""
    return lcb_messages(sample.meta.get("problem") or str(sample.prompt),
                        sample.meta.get("starter_code") or "")


def lcb_accepts(task: Task) -> str | None:
    if family(task.name) == "livecodebench":
        return None
    return (f"task {task.name!r} is not LiveCodeBench: the lcb protocol's prompt is "
            "LiveCodeBench's own (use --protocol r1, greedy or default for other tasks)")


PROMPT_STYLES: dict[str, PromptStyle] = {s.name: s for s in (
    PromptStyle(TASK_STYLE, "the task's own prompt and system prompt", None),
    PromptStyle("r1", "DeepSeek-R1's usage: no system prompt, instructions in the user turn "
                "(math: 'Please reason step by step, and put your final answer within "
                "\\boxed{}.')", r1_messages),
    PromptStyle("lcb", "LiveCodeBench's official chat prompt (its system message and "
                "### Question / ### Format / ### Answer template)", lcb_task_messages,
                accepts=lcb_accepts),
)}
"""Every prompt style, by name."""


def prompt_style(name: str) -> PromptStyle:
    """The style `name`; ValueError naming the styles for an unknown one."""
    if name not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {name!r}; styles: {', '.join(PROMPT_STYLES)}")
    return PROMPT_STYLES[name]


class PromptedTask(Task):
    """`inner` with its samples' prompts rendered by a style: same name, splits, gold and
    verdicts; no system prompt (the style's messages carry any system message)."""

    system_prompt = None

    def __init__(self, inner: Task, style: PromptStyle) -> None:
        self.inner, self.style = inner, style
        self.name, self.kind, self.splits = inner.name, inner.kind, inner.splits
        self.requires_thinking, self.options = inner.requires_thinking, inner.options
        self.source = f"{inner.source}; prompt style {style.name}"
        self.declared_sizes = inner.declared_sizes

    def build_splits(self) -> dict[str, Sequence[Sample]]:
        render = self.style.render
        return {split: [dataclasses.replace(s, prompt=render(self.inner, s))
                        for s in self.inner.samples(split)] for split in self.splits}

    def judge(self, sample: Sample, completion: str, grading: Grading) -> Score:
        return self.inner.score(sample, completion, grading)

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        return self.inner.preflight(grading)


def prompted_tasks(tasks: Mapping[str, Task], name: str) -> dict[str, Task]:
    """`tasks` as style `name` puts them (unchanged for `task`); ValueError naming a task the
    style cannot render, before anything is generated."""
    style = prompt_style(name)
    if style.render is None:
        return dict(tasks)
    problems = [p for p in (style.accepts(t) for t in tasks.values()) if p]
    if problems:
        raise ValueError(problems[0])
    return {n: PromptedTask(t, style) for n, t in tasks.items()}
