"""The contracts every other part relies on: `Sample`, `Score` and `Task`.

A `Sample` is one prompt of one task plus the gold data its verifier needs. A `Score` is one
verdict, with a status that never hides a verifier's own failure. A `Task` yields samples per split
and scores completions. This module defines the shapes only: no I/O, no verifiers, no registry.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["correct", "wrong", "no_answer", "timeout", "error"]
STATUSES: tuple[str, ...] = ("correct", "wrong", "no_answer", "timeout", "error")
SPLITS: tuple[str, ...] = ("train", "val", "test")

Message = Mapping[str, str]  # {"role": ..., "content": ...}


@dataclass(frozen=True)
class Sample:
    """One prompt of one task, with the gold data its verifier needs. Immutable, JSON-able."""

    id: str
    """Stable id, unique within the task (hash of the normalised prompt unless the data has one)."""
    task: str
    """Registered name of the task the sample belongs to."""
    prompt: str | tuple[Message, ...]
    """Plain text, or chat messages (role/content) to be rendered with the tokenizer's template."""
    answer: str | None = None
    """Gold answer for math tasks (raw LaTeX or plain text)."""
    tests: Mapping[str, Any] | None = None
    """Gold tests for code tasks (`stdio`, `call` or `assert` format, see envs/code.py)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extra fields (difficulty, source row, ...); never read by verifiers."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if isinstance(self.prompt, tuple):
            d["prompt"] = [dict(m) for m in self.prompt]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sample:
        prompt = d["prompt"]
        if isinstance(prompt, list):
            prompt = tuple(dict(m) for m in prompt)
        return cls(
            id=str(d["id"]),
            task=str(d["task"]),
            prompt=prompt,
            answer=d.get("answer"),
            tests=d.get("tests"),
            meta=dict(d.get("meta") or {}),
        )

    def messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The prompt as chat messages, with `system_prompt` first when given and absent."""
        if isinstance(self.prompt, str):
            msgs = [{"role": "user", "content": self.prompt}]
        else:
            msgs = [dict(m) for m in self.prompt]
        if system_prompt and not any(m.get("role") == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": system_prompt})
        return msgs


@dataclass(frozen=True)
class Score:
    """One verdict on one completion. `error`/`timeout` are the verifier's failures, not wrong."""

    status: Status
    """correct | wrong | no_answer | timeout | error."""
    reward: float
    """Reward fed to the trainer (default mapping: correct +1, everything else -1)."""
    detail: str = ""
    """Why: the extracted answer, the failing test, the exception (truncated)."""
    latency_s: float = 0.0
    """Wall-clock seconds the verification took."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Score.status {self.status!r} is not one of {', '.join(STATUSES)}")

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reward_for(status: str, correct_reward: float = 1.0, wrong_reward: float = -1.0) -> float:
    """The ScaleRL reward (A.3): +1 for a correct answer, -1 for anything else."""
    return correct_reward if status == "correct" else wrong_reward


def truncate(text: str, limit: int = 300) -> str:
    """Cut `text` for logs and details, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[+{len(text) - limit} chars]"


class Task(abc.ABC):
    """A task: a name, a kind, splits, samples per split, and a verifier.

    Subclasses set `name` and `kind`, implement `samples(split)` and `score(sample, completion)`.
    `score` must never raise: a verifier failure is `Score(status="error")` or `"timeout"`.
    """

    name: str = ""
    kind: str = ""
    splits: tuple[str, ...] = ("train", "test")
    system_prompt: str | None = None
    requires_thinking: bool = False
    source: str = ""
    """Where the data comes from (a path, a package, a generator), shown by `scalerl tasks list`."""

    @abc.abstractmethod
    def samples(self, split: str) -> Sequence[Sample]:
        """All samples of `split`; raises ValueError naming the valid splits for an unknown one."""

    @abc.abstractmethod
    def score(self, sample: Sample, completion: str) -> Score:
        """Verdict on `completion` for `sample`. Never raises."""

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(
                f"task {self.name!r} has no split {split!r}; valid: {', '.join(self.splits)}"
            )

    def sample_by_id(self, sample_id: str) -> Sample:
        for split in self.splits:
            for s in self.samples(split):
                if s.id == sample_id:
                    return s
        raise KeyError(f"task {self.name!r} has no sample {sample_id!r}")


def dumps(obj: Any) -> str:
    """Compact JSON for JSONL rows."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
