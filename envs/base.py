"""The shapes every other part relies on: `Sample` and `Score`, the statuses and splits.

A `Sample` is one prompt of one task plus the gold data its verifier needs. A `Score` is one
verdict: a status that never hides a verifier's own failure, why, and for a graded verdict the
credit earned (the fraction of tests passed, an environment's own reward), in [0, 1]. A verdict
carries no reward: the trainer maps status and credit to the reward once, from the run's config
(trainer/rewards.py).
This module defines shapes only: no I/O, no verifiers, no registry, and not the `Task` base class
(envs/task.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
    """Gold tests for code tasks (`stdio`, `call` or `assert` format, see envs/code/verifier.py)."""
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
    """One verdict on one completion: a status and why. `error` is the verifier's own failure
    (never trained on); `timeout` is the candidate's program (or answer) passing its deadline."""

    status: Status
    """correct | wrong | no_answer | timeout | error."""
    detail: str = ""
    """Why: the extracted answer, the failing test, the exception (truncated)."""
    latency_s: float = 0.0
    """Wall-clock seconds the verification took."""
    reward: float | None = None
    """Graded credit in [0, 1] (partial credit: the fraction of tests passed; an environment's
    own reward, mapped); None: all-or-nothing, the status alone decides."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Score.status {self.status!r} is not one of {', '.join(STATUSES)}")
        r = self.reward
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float))
                              or not 0.0 <= r <= 1.0):
            raise ValueError(f"Score.reward must be a number in [0, 1] or None, got {r!r}")

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def truncate(text: str, limit: int = 300) -> str:
    """Cut `text` for logs and details, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[+{len(text) - limit} chars]"


def dumps(obj: Any) -> str:
    """Compact JSON for JSONL rows."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
