"""TRL-style environment classes, registered unchanged: `environment: {class: pkg.mod:Env}`.

TRL's `environment_factory` contract (trl GRPOTrainer / AsyncGRPO): a no-argument factory (the
class) makes one instance per rollout; its `reset(**row)` returns the first observation (text
appended to the prompt's last user message) or None; its public methods, typed and documented,
are the tools the model may call; `get_reward()` (or a `reward` attribute or method) read at the
end is the rollout's reward. `ClassEnvironment` is `ToolEnvironment` with the factory as its
per-rollout object (envs/tool_env.py holds the whole behaviour: calls checked against the
methods' schemas, run off the event loop with a time limit, outputs capped; the reward mapped to
credit through `reward_range`, default [0, 1]; none: the task's judge). One instance is made at
construction to read the tools' schemas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scalerl.envs.adapters.base import ADAPTERS
from scalerl.envs.tool_env import ToolEnvironment
from scalerl.envs.tools import Tool, ToolError, import_object


class ClassEnvironment(ToolEnvironment):
    """A TRL-style class's instances as the per-rollout objects (module docstring)."""

    name = "class"

    def __init__(self, factory: Callable[[], Any],
                 tools: Sequence[str | Callable[..., Any] | Tool] = (), **limits: Any) -> None:
        if not callable(factory):
            raise ToolError(f"environment class {factory!r} is not callable")
        self.factory = factory
        self.name = getattr(factory, "__name__", "class")
        super().__init__(tools, **limits)

    def __repr__(self) -> str:
        return f"ClassEnvironment({self.name}, tools={[t.name for t in self._schema_tools]})"

    def spawn(self) -> Any:
        return self.factory()

    def probe(self) -> Any:
        return self.factory()


@ADAPTERS.register("class")
def class_environment(ref: str | Callable[[], Any], **options: Any) -> ClassEnvironment:
    """`environment: {class: package.module:Class, ...options}`."""
    factory = import_object(ref, "environment class") if isinstance(ref, str) else ref
    return ClassEnvironment(factory, **options)
