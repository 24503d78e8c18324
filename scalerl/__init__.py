"""scalerl: verifiable-reward environments, a vLLM rollout engine and the ScaleRL trainer.

The glue lives here (command line, config, recipes, evaluation reports, curve fitting); the parts
are the subpackages `scalerl.envs`, `scalerl.sandbox`, `scalerl.rollout` and `scalerl.trainer`,
whose sources sit at the repository root (`envs/`, `sandbox/`, `rollout/`, `trainer/`).
"""

__version__ = "0.1.0"
