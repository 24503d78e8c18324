"""`arith`: seedable synthetic arithmetic for the tiny model, with a fixed held-out test set.

Prompts are short (`23+58=`); the gold answer is the integer, and `meta["solution"]` is a worked
solution in the warm-start format `<think>3+8=11 c1 2+5+1=8</think>\\boxed{81}` (a digit-by-digit
scratchpad, least significant digit first). Test problems come from a hash-defined part of each
level's problem space that train never draws from, and train is also filtered by the generic
hash check. Scoring is the `math` kind's (math-verify), with thinking required: this module
writes no verifier of its own.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scalerl.envs.base import Sample
from scalerl.envs.data import assign_splits, prompt_key, split_of
from scalerl.envs.math import verifier as _math_kind  # noqa: F401 - registers the `math` kind
from scalerl.envs.registry import (
    checked_levels,
    register_task,
    register_task_prefix,
)
from scalerl.envs.task import Task

ARITH_SYSTEM_PROMPT = "Think in <think></think>, then give the answer in \\boxed{}."
HELDOUT_FRACTION = 0.1
"""Share of each level's problem space reserved for the test set (by a hash of the prompt)."""
HELDOUT_SEED = 1729


# --- scratchpads: pure functions, (steps, answer) ---------------------------------------------
def _digits(n: int, width: int) -> list[int]:
    """Decimal digits of n, least significant first, zero-padded to `width`."""
    return [int(c) for c in reversed(str(n).zfill(width))]


def add_steps(a: int, b: int) -> tuple[str, str]:
    """`23+58` -> ("3+8=11 c1 2+5+1=8", "81"): column sums, carry marked `cK`."""
    width = max(len(str(a)), len(str(b)))
    steps, out, carry = [], [], 0
    for i, (x, y) in enumerate(zip(_digits(a, width), _digits(b, width), strict=True)):
        s = x + y + carry
        step = f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={s}"
        if i < width - 1:
            out.append(str(s % 10))
            carry = s // 10
            step += f" c{carry}" if carry else ""
        else:
            out.append(str(s))
        steps.append(step)
    return " ".join(steps), "".join(reversed(out))


def sub_steps(a: int, b: int) -> tuple[str, str]:
    """`52-17` -> ("12-7=5 b1 5-1-1=3", "35"): a borrow shows as `1x` and `bK`; needs a >= b."""
    if a < b:
        raise ValueError(f"sub_steps needs a >= b, got {a}-{b}")
    width = len(str(a))
    steps, out, borrow = [], [], 0
    for i, (x, y) in enumerate(zip(_digits(a, width), _digits(b, width), strict=True)):
        v = x - borrow - y
        need = v < 0 and i < width - 1
        left = f"1{x}" if need else f"{x}"
        step = f"{left}-{y}" + (f"-{borrow}" if borrow else "") + f"={v + 10 if need else v}"
        out.append(str(v + 10 if need else v))
        borrow = 1 if need else 0
        steps.append(step + (" b1" if need else ""))
    return " ".join(steps), "".join(reversed(out)).lstrip("0") or "0"


def mul_steps(a: int, m: int) -> tuple[str, str]:
    """`47*6` -> ("7*6=42 c4 4*6+4=28", "282"): one digit of a at a time, times a 1-digit m."""
    if not 0 <= m <= 9:
        raise ValueError(f"mul_steps multiplies by one digit, got {m}")
    width = len(str(a))
    steps, out, carry = [], [], 0
    for i, x in enumerate(_digits(a, width)):
        p = x * m + carry
        step = f"{x}*{m}" + (f"+{carry}" if carry else "") + f"={p}"
        if i < width - 1:
            out.append(str(p % 10))
            carry = p // 10
            step += f" c{carry}" if carry else ""
        else:
            out.append(str(p))
        steps.append(step)
    return " ".join(steps), "".join(reversed(out)).lstrip("0") or "0"


@dataclass(frozen=True)
class Level:
    """One difficulty level: `a OP b` with a and b drawn from the given ranges (inclusive)."""

    name: str
    op: str
    a_range: tuple[int, int]
    b_range: tuple[int, int]
    steps: Callable[[int, int], tuple[str, str]]

    def problem(self, rng: random.Random) -> tuple[int, int]:
        a, b = rng.randint(*self.a_range), rng.randint(*self.b_range)
        return (max(a, b), min(a, b)) if self.op == "-" else (a, b)

    def space(self) -> int:
        return (self.a_range[1] - self.a_range[0] + 1) * (self.b_range[1] - self.b_range[0] + 1)


LEVELS: dict[str, Level] = {
    lv.name: lv
    for lv in (
        Level("add2", "+", (10, 99), (10, 99), add_steps),
        Level("add3", "+", (100, 999), (100, 999), add_steps),
        Level("add4", "+", (1000, 9999), (1000, 9999), add_steps),
        Level("sub2", "-", (10, 99), (10, 99), sub_steps),
        Level("sub3", "-", (100, 999), (100, 999), sub_steps),
        Level("mul1", "*", (10, 99), (2, 9), mul_steps),
        Level("mul2", "*", (100, 999), (2, 9), mul_steps),
    )
}
DEFAULT_MIX: tuple[str, ...] = ("add2", "add3", "sub2", "sub3", "mul1", "mul2")


def make_sample(task: str, level: Level, a: int, b: int) -> Sample:
    steps, answer = level.steps(a, b)
    prompt = f"{a}{level.op}{b}="
    return Sample(
        id=f"{level.name}-{a}{level.op}{b}",
        task=task,
        prompt=prompt,
        answer=answer,
        meta={"level": level.name, "solution": f"<think>{steps}</think>\\boxed{{{answer}}}"},
    )


def is_heldout(prompt: str) -> bool:
    """Whether a prompt belongs to the held-out part of the problem space (fixed, seed-free)."""
    key = prompt_key(prompt)
    return split_of(key, test_fraction=HELDOUT_FRACTION, seed=HELDOUT_SEED) == "test"


def draw(task: str, level: Level, n: int, rng: random.Random, heldout: bool) -> list[Sample]:
    """Up to n distinct problems of `level` from the held-out part (or from the rest)."""
    out: dict[str, Sample] = {}
    for _ in range(50 * n):
        if len(out) >= n:
            break
        a, b = level.problem(rng)
        prompt = f"{a}{level.op}{b}="
        if prompt not in out and is_heldout(prompt) == heldout:
            out[prompt] = make_sample(task, level, a, b)
    return list(out.values())


class ArithTask(Task):
    """Synthetic arithmetic over `levels`; train depends on `seed`, test never does."""

    kind = "math"
    requires_thinking = True
    system_prompt = ARITH_SYSTEM_PROMPT

    def __init__(
        self,
        name: str = "arith",
        levels: Sequence[str] = DEFAULT_MIX,
        *,
        seed: int = 0,
        train_size: int = 1000,
        test_size: int = 50,
    ) -> None:
        self.name = name
        self.levels = checked_levels("arith", levels, tuple(LEVELS))
        self.seed = seed
        self.train_size, self.test_size = train_size, test_size
        self.source = f"synthetic: {', '.join(self.levels)} (seed {seed})"

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        test, train = [], []
        for name in self.levels:
            level = LEVELS[name]
            test += draw(self.name, level, self.test_size, random.Random(f"test:{name}"), True)
            rng = random.Random(f"train:{self.seed}:{name}")
            train += draw(self.name, level, self.train_size, rng, False)
        # Belt and braces: the generic leak check drops any train prompt equal to a test prompt.
        test_keys = [prompt_key(s.prompt) for s in test]
        split = assign_splits(
            [prompt_key(s.prompt) for s in train], test_fraction=0.0, heldout_keys=test_keys
        )
        return {"train": tuple(train[i] for i in split.train), "test": tuple(test)}


register_task("arith")(ArithTask)


@register_task_prefix("arith", description=f"arithmetic levels: {', '.join(LEVELS)}")
def arith_levels(levels: str) -> ArithTask:
    """`arith:add2` or `arith:add2,sub2`: only those levels."""
    return ArithTask(f"arith:{levels}", tuple(filter(None, levels.split(","))))
