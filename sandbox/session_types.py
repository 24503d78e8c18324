"""The shapes a tool session returns: `ToolOutcome`, `ToolStatus`, `SessionFailed`.

Defined here, in the sandbox layer, so that sandbox/session.py can return them without importing
the layer above it (sandbox < envs, tests/test_layering.py); envs/environment.py re-exports them
as part of the multi-turn contract, and that is where callers import them from. Shapes only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ToolStatus = Literal["ok", "error", "timeout"]
TOOL_STATUSES: tuple[str, ...] = ("ok", "error", "timeout")
"""`ok`: the code ran to its end; `error`: it raised (the traceback is the output the model sees);
`timeout`: it ran past the per-call limit (the output says so). All three are observations for
the model, never a verifier error; a sandbox that cannot start or dies is `SessionFailed`."""


class SessionFailed(RuntimeError):
    """The tool's sandbox could not start or died mid-episode: the rollout's verdict is `error`
    (excluded from training and counted, as a verifier error is), never an observation."""


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call gave."""

    status: ToolStatus
    output: str
    """What the model is shown: stdout and stderr (or the traceback, or "timed out after N s"),
    already cut to the observation cap."""
    latency_s: float
    truncated: bool = False
    """The output was cut to the cap."""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "output": self.output,
                "latency_s": round(self.latency_s, 4), "truncated": self.truncated}
