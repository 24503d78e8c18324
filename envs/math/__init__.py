"""Math: the `math` kind's verifier (math-verify in a deadline-enforced pool) and math tasks.

`verifier` scores completions against gold answers and registers the `math` kind; `exact` decides
plain integers and exact rationals without math-verify; `files` reads the gold of Polaris/MATH
rows; `arith` and `reasoning_gym` are the built-in math tasks; `warmup` is the pool's forkserver
preload. Importing this package imports the verifier only (not math-verify, not the tasks).
"""

from scalerl.envs.math.verifier import (
    MATH_SYSTEM_PROMPT,
    make_pool,
    score_math,
    score_math_many,
    shared_pool,
    shutdown_pools,
    strip_thinking,
    warm_up,
)

__all__ = ["MATH_SYSTEM_PROMPT", "make_pool", "score_math", "score_math_many", "shared_pool",
           "shutdown_pools", "strip_thinking", "warm_up"]
