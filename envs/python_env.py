"""The `python` environment: a tool environment with one tool, the sandboxed interpreter.

Each assistant turn's calls run in the rollout's own session, acquired at its first call (a
rollout that never calls the tool costs no interpreter) and kept for the whole episode (variables
survive between calls, as in a notebook); `close` kills it. Code that raises or times out is an
observation (the session's `ToolOutcome`); a session that cannot start or dies raises
`SessionFailed`. Everything else (parsing, the unknown-tool and bad-argument errors, the output
cap) is `ToolEnvironment`'s (envs/tool_env.py); the sandbox is sandbox/session.py's.
"""

from __future__ import annotations

from scalerl.envs.environment import register_environment
from scalerl.envs.tool_env import ToolEnvironment
from scalerl.envs.tools import PYTHON_TOOL, check_limits, cut_observation

__all__ = ["PythonEnvironment", "check_limits", "cut_observation"]


@register_environment("python")
class PythonEnvironment(ToolEnvironment):
    """Tool-integrated reasoning with a sandboxed, persistent Python interpreter."""

    name = "python"

    def __init__(self, max_turns: int = 3, max_observation_chars: int = 2000) -> None:
        super().__init__((PYTHON_TOOL,), max_turns=max_turns,
                         max_observation_chars=max_observation_chars)

    def __repr__(self) -> str:
        return (f"PythonEnvironment(max_turns={self.max_turns}, "
                f"max_observation_chars={self.max_observation_chars})")
