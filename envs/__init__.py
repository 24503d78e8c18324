"""Task environments: the Sample/Score/Task contracts, the registry, data and splits, verifiers.

Import `scalerl.envs` to get the contracts and `get_task`; verifiers live in `envs/math.py` and
`envs/code.py`. Nothing here generates text or trains; nothing here imports rollout or trainer.
"""

from scalerl.envs.base import STATUSES, Sample, Score, Task

__all__ = ["STATUSES", "Sample", "Score", "Task"]
