"""Exact answers decided without math-verify: plain boxed integers, and exact rationals.

`integer_verdict` runs in the parent before any pool job: an answer that is exactly one
`\\boxed{integer}` against an integer gold is compared as Python ints (the arith tasks, AIME- and
GSM8K-style golds), skipping the worker round trip and math-verify's ~3 ms parse. Anything else
(other text around the box, several boxes, leading zeros, decimals, thousands separators) returns
None and goes to math-verify. `exact_equal` runs in the worker after math-verify's parse: exact
rationals, decimals as written included, are compared exactly before its tolerance can call
1/2^98 equal to 1/2^99 or `0.0000673` equal to `0.0000672` (it rounds to 6 decimal places). No
pool, no parsing of LaTeX here.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

MAX_EXACT_BITS = 100_000
"""Exact-rational pre-check gives up (falls back to math-verify) on numbers larger than this."""
MAX_FAST_DIGITS = 100
"""Integers with more digits than this go to math-verify."""

_INT = rf"-?(?:0|[1-9]\d{{0,{MAX_FAST_DIGITS - 1}}})"
_BOXED_INT = re.compile(rf"\s*\$?\\boxed\{{\s*({_INT})\s*\}}\$?\s*\.?\s*")
_GOLD_INT = re.compile(rf"\s*({_INT})\s*")


def integer_verdict(answer: str, gold: str) -> tuple[str, str] | None:
    """(status, detail) when the answer part is one boxed integer and the gold an integer, else
    None. Agrees with math-verify on every shape it accepts (tests/envs/math/test_math_exact.py)."""
    got, want = _BOXED_INT.fullmatch(answer), _GOLD_INT.fullmatch(gold)
    if got is None or want is None:
        return None
    a, g = int(got.group(1)), int(want.group(1))
    return ("correct" if a == g else "wrong"), f"answer {a} vs gold {g} (exact integer)"


def exact_equal(gold: Any, pred: Any) -> bool | None:
    """True/False when both sides are exact rationals (integers, fractions, integer powers of
    them, sums and products); None when either is not, so math-verify decides."""
    a, b = exact_value(gold), exact_value(pred)
    if a is None or b is None:
        return None
    return a == b


def exact_value(expr: Any) -> Fraction | None:
    """The exact value of a sympy expression built only from rationals and decimals with +, * and
    integer powers; None for anything else (symbols, roots, percentages) or a huge number."""
    import sympy

    if isinstance(expr, sympy.Rational):  # Integer is a Rational
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, sympy.Float):
        return _decimal_value(expr)
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [exact_value(arg) for arg in expr.args]
        if any(p is None for p in parts):
            return None
        total = Fraction(0) if isinstance(expr, sympy.Add) else Fraction(1)
        for p in parts:
            total = total + p if isinstance(expr, sympy.Add) else total * p
        return total
    if isinstance(expr, sympy.Pow):
        return _exact_pow(exact_value(expr.base), exact_value(expr.exp))
    return None


def _decimal_value(number: Any) -> Fraction | None:
    """A decimal as written (`0.0000672`, `18.90`): math-verify parses it to a Float carrying the
    literal's digits, so its printed form is the literal's exact value. None for inf/nan or an
    exponent past MAX_EXACT_BITS."""
    if not number.is_finite:
        return None
    _sign, mantissa, exponent, _bits = number._mpf_
    if abs(exponent) + int(mantissa).bit_length() > MAX_EXACT_BITS:
        return None
    try:
        return Fraction(str(number))
    except ValueError:
        return None


def _exact_pow(base: Fraction | None, exp: Fraction | None) -> Fraction | None:
    if base is None or exp is None or exp.denominator != 1:
        return None
    n = exp.numerator
    bits = max(base.numerator.bit_length(), base.denominator.bit_length(), 1)
    if abs(n) * bits > MAX_EXACT_BITS or (base == 0 and n < 0):
        return None
    return base**n
