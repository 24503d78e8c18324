"""Task environments: Sample/Score/Task, the registries and the catalog, data and splits, verifiers.

`import scalerl.envs` gives the contracts (`Sample`, `Score`, `Task`), the ways to register tasks
and kinds, and the catalog's lookups (`get_task`, `get_kind`, `task_names`), which see the
built-ins, `scalerl.tasks` plugins and `$SCALERL_TASKS` files. The verifiers live in `envs/math/`
and `envs/code/`. Nothing here generates text or trains; nothing here imports rollout or trainer.
"""

from scalerl.envs.base import SPLITS, STATUSES, Sample, Score
from scalerl.envs.catalog import get_kind, get_task, task_names
from scalerl.envs.kinds import Kind, UnknownTaskError, register_kind
from scalerl.envs.registry import register_task, register_task_prefix
from scalerl.envs.task import Task

__all__ = ["SPLITS", "STATUSES", "Kind", "Sample", "Score", "Task", "UnknownTaskError",
           "get_kind", "get_task", "register_kind", "register_task", "register_task_prefix",
           "task_names"]
