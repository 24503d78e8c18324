"""`arith_tool`: long multiplication and exact division that a small model solves only with a tool.

Problems are `a*b=` (4-6 digit factors) and `a/b=` (an exact integer quotient, 3-4 digits, of a
3-digit divisor), too long to do reliably in the head of a small model and trivial for Python.
The system prompt says the model may run Python in a ```python block (answered in a ```output
block, the `plain` tool format) and must box the final answer; scoring is the `math` kind's with
`boxed_only` (a number in a tool's output is not an answer). The environment is the `python` one
(envs/python_env.py), 3 turns. Splits are deterministic: test is a hash-defined part of each
level's problem space (seed-free, as `arith`'s), train depends on the seed and never draws from
it. `meta["solution"]` is a worked tool-use trace (the warm start's format). No verifier here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from scalerl.envs.base import Sample
from scalerl.envs.data import assign_splits, prompt_key
from scalerl.envs.math import verifier as _math_kind  # noqa: F401 - registers the `math` kind
from scalerl.envs.math.arith import is_heldout
from scalerl.envs.python_env import PythonEnvironment
from scalerl.envs.registry import (
    checked_levels,
    register_task,
    register_task_prefix,
)
from scalerl.envs.task import Task

ARITH_TOOL_SYSTEM_PROMPT = (
    "Compute the exact integer result. You may run Python: write code in a ```python block, "
    "close it with ```, then write ```output and its output will be shown. "
    "Give the final answer in \\boxed{}."
)
ARITH_TOOL_MAX_TURNS = 3


@dataclass(frozen=True)
class ToolLevel:
    """`a*b` with a, b drawn from the ranges, or `a/b` with a = q*b, q and b from the ranges."""

    name: str
    op: str
    """`*` or `/` (exact division: the first range is the quotient's)."""
    a_range: tuple[int, int]
    b_range: tuple[int, int]

    def problem(self, rng: random.Random) -> tuple[int, int, int]:
        """(left operand, right operand, answer)."""
        x, b = rng.randint(*self.a_range), rng.randint(*self.b_range)
        return (x, b, x * b) if self.op == "*" else (x * b, b, x)


TOOL_LEVELS: dict[str, ToolLevel] = {
    lv.name: lv
    for lv in (
        ToolLevel("mul4", "*", (1000, 9999), (1000, 9999)),
        ToolLevel("mul5", "*", (10000, 99999), (1000, 99999)),
        ToolLevel("mul6", "*", (100000, 999999), (1000, 999999)),
        ToolLevel("div3", "/", (100, 999), (100, 999)),
        ToolLevel("div4", "/", (1000, 9999), (100, 999)),
    )
}
DEFAULT_TOOL_MIX: tuple[str, ...] = tuple(TOOL_LEVELS)


def tool_solution(a: int, op: str, b: int, answer: int) -> tuple[str, str]:
    """(the code a tool-using solver runs, the worked trace in the `plain` format)."""
    code = f"print({a} {'*' if op == '*' else '//'} {b})"
    return code, f"```python\n{code}\n```\n```output\n{answer}\n```\n\\boxed{{{answer}}}"


def make_tool_sample(task: str, level: ToolLevel, a: int, b: int, answer: int) -> Sample:
    code, solution = tool_solution(a, level.op, b, answer)
    return Sample(id=f"{level.name}-{a}{level.op}{b}", task=task, prompt=f"{a}{level.op}{b}=",
                  answer=str(answer),
                  meta={"level": level.name, "code": code, "solution": solution})


def draw_tool(task: str, level: ToolLevel, n: int, rng: random.Random,
              heldout: bool) -> list[Sample]:
    """Up to n distinct problems of `level` from the held-out part (or from the rest)."""
    out: dict[str, Sample] = {}
    for _ in range(50 * n):
        if len(out) >= n:
            break
        a, b, answer = level.problem(rng)
        prompt = f"{a}{level.op}{b}="
        if prompt not in out and is_heldout(prompt) == heldout:
            out[prompt] = make_tool_sample(task, level, a, b, answer)
    return list(out.values())


class ArithToolTask(Task):
    """Long multiplication and exact division with a Python tool; train depends on `seed`."""

    kind = "math"
    system_prompt = ARITH_TOOL_SYSTEM_PROMPT
    options = MappingProxyType({"boxed_only": True})

    def __init__(self, name: str = "arith_tool", levels: Sequence[str] = DEFAULT_TOOL_MIX, *,
                 seed: int = 0, train_size: int = 1000, test_size: int = 50,
                 max_turns: int = ARITH_TOOL_MAX_TURNS) -> None:
        self.levels = checked_levels("arith_tool", levels, tuple(TOOL_LEVELS))
        self.name, self.seed = name, seed
        self.train_size, self.test_size = train_size, test_size
        self.environment = PythonEnvironment(max_turns=max_turns)
        self.source = f"synthetic, with a python tool: {', '.join(self.levels)} (seed {seed})"

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        test, train = [], []
        for name in self.levels:
            level = TOOL_LEVELS[name]
            rng = random.Random(f"arith_tool:test:{name}")
            test += draw_tool(self.name, level, self.test_size, rng, True)
            rng = random.Random(f"arith_tool:train:{self.seed}:{name}")
            train += draw_tool(self.name, level, self.train_size, rng, False)
        test_keys = [prompt_key(s.prompt) for s in test]  # the generic leak check, as arith's
        split = assign_splits([prompt_key(s.prompt) for s in train], test_fraction=0.0,
                              heldout_keys=test_keys)
        return {"train": tuple(train[i] for i in split.train), "test": tuple(test)}


register_task("arith_tool")(ArithToolTask)


@register_task_prefix("arith_tool", description=f"arith_tool levels: {', '.join(TOOL_LEVELS)}")
def arith_tool_levels(levels: str) -> ArithToolTask:
    """`arith_tool:mul4` or `arith_tool:mul4,div3`: only those levels."""
    return ArithToolTask(f"arith_tool:{levels}", tuple(filter(None, levels.split(","))))
