"""The exact paths beside math-verify: a lone boxed integer decided in the parent agrees with
math-verify's own verdict on every shape it accepts, leaves every other shape to math-verify,
and never touches the pool."""

from __future__ import annotations

import random

import pytest

from scalerl.envs.math.exact import MAX_FAST_DIGITS, integer_verdict
from scalerl.envs.math.verifier import check_answer, score_math

SHAPES = ("\\boxed{{{}}}", "\n\\boxed{{ {} }}\n", "$\\boxed{{{}}}$", "\\boxed{{{}}}.",
          "  $\\boxed{{{}}}$. ")


def _pairs() -> list[tuple[int, int]]:
    rng = random.Random(7)
    pairs = [(0, 0), (0, 1), (-1, 1), (7, -7), (10**98, 10**98), (10**98, 10**98 + 1)]
    for digits in (1, 2, 3, 5, 9, 19, 40):
        for _ in range(4):
            a = rng.randrange(10 ** (digits - 1), 10**digits) * rng.choice((1, -1))
            pairs.append((a, a))
            pairs.append((a, a + rng.choice((1, -1, 10, 100))))
    return pairs


@pytest.mark.parametrize("boxed_only", [False, True])
def test_integer_verdict_agrees_with_math_verify(boxed_only):
    checked = 0
    for answer, gold in _pairs():
        for shape in SHAPES:
            text = shape.format(answer)
            fast = integer_verdict(text, f" {gold}")
            assert fast is not None, text
            slow = check_answer(text, str(gold), boxed_only)[0]
            assert fast[0] == slow, (text, gold, fast, slow)
            checked += 1
    assert checked == len(_pairs()) * len(SHAPES)


@pytest.mark.parametrize("answer,gold", [
    ("\\boxed{05}", "5"), ("\\boxed{1,000}", "1000"), ("\\boxed{2.0}", "2"),
    ("\\boxed{1} and \\boxed{2}", "1"), ("x = \\boxed{3}", "3"), ("\\boxed{3}\\boxed{4}", "34"),
    ("\\boxed{3/4}", "3"), ("\\boxed{3}", "3/4"), ("\\boxed{3}", "1,000"), ("\\boxed{3}", "03"),
    ("3", "3"), ("\\boxed{+3}", "3"), ("\\boxed{" + "9" * (MAX_FAST_DIGITS + 1) + "}", "9"),
])
def test_other_shapes_are_left_to_math_verify(answer, gold):
    assert integer_verdict(answer, gold) is None


class _BrokenPool:
    def run_many(self, *args, **kwargs):
        raise RuntimeError("the pool must not be used")


def test_boxed_integers_never_reach_the_pool():
    broken = _BrokenPool()
    right = score_math("<think>2+2</think>\\boxed{4}", "4", requires_thinking=True, pool=broken)
    wrong = score_math("<think>2+2</think>\\boxed{5}", "4", requires_thinking=True, pool=broken)
    other = score_math("<think>2+2</think>\\boxed{4.0}", "4", requires_thinking=True, pool=broken)
    assert (right.status, wrong.status) == ("correct", "wrong")
    assert "exact integer" in right.detail
    assert other.status == "error" and "must not be used" in other.detail
