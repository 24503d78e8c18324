"""The comparison rules (envs/code/rules.py): hand-worked cases, then differentially against the
references' own verdicts.

tests/envs/code/data/reference_verdicts.json holds (output, expected) and (returned, expected)
pairs judged by LiveCodeBench's `grade_stdio` / `grade_call_based` and by DeepCoder's TACO
checker (`compare_std_results` / `execute_cb_code`), run by scripts/reference_verdicts.py on the
references' code at the revisions the file names. `lcb` must agree on every pair. `taco` must
never accept what TACO rejects, and may reject what TACO accepts only in the named classes of
TACO false positives (`taco_false_positive`, an independent statement of them), each of which
the corpus must show.
"""

from __future__ import annotations

import ast
import collections
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pytest

from scalerl.envs.code.rules import (
    RULE_NAMES,
    RULES,
    get_rule,
    lcb_call,
    lcb_stdio,
    stdio_equal,
    taco_call,
    taco_stdio,
    values_equal,
)

REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_verdicts.json").read_text(
    encoding="utf-8"))
BIG = 10**18


def test_the_registry_holds_the_named_rules_and_refuses_others_in_one_line():
    assert tuple(RULES) == RULE_NAMES
    with pytest.raises(ValueError, match=r"^unknown comparison rule 'lcbx'; valid: tokens, lcb, "
                                         r"taco$"):
        get_rule("lcbx")
    assert (get_rule("lcb").int_max_str_digits, get_rule("taco").int_max_str_digits) == (
        50_000, None)
    assert get_rule("lcb").run_wall_s(10, 6.0) == 75.0  # (6 + 1) * 10 + 5
    assert get_rule("tokens").run_wall_s is None


# --- hand-worked cases, from reading lcb_runner/evaluation/testing_util.py -------------------
@pytest.mark.parametrize("output, expected, verdict", [
    ("3\n", "3", True),                          # the whole text is stripped
    ("  1\n2  \n\n", "1\n2", True),              # and each line
    ("1\r\n2\r\n", "1\n2", True),                # a line's \r is whitespace
    ("3.0", "3", True), ("1e0", "1", True), ("0.50", "0.5", True), ("-0", "0", True),
    ("1  2", "1 2", True),                       # numbers: token by token
    ("a  b", "a b", False),                      # words: the line as text only
    ("YES", "Yes", False),                       # case matters
    ("1\n\n2", "1\n2", False),                   # a blank line inside counts
    ("1 2", "2 1", False),                       # order matters
    ("1000000000000000000", "1000000000000000001", False),  # no float collapse of big ints
    ("1e18", "1000000000000000000", True),       # Decimal: the same number
    ("0.30000000000000004", "0.3", False),       # no tolerance
    ("3.14", "3.14159265", False),               # a float rounded
    ("nan", "nan", True),                        # the same text
    ("NaN", "nan", False),                       # Decimal NaN equals nothing
    ("Infinity", "inf", True), ("1_000", "1000", True),  # Decimal's own spellings
    ("", "\n", True), ("", "0", False),
])
def test_lcb_stdio_by_hand(output, expected, verdict):
    assert lcb_stdio(output, expected) is verdict


@pytest.mark.parametrize("returned, expected, verdict", [
    (BIG + 1, 1e18, False), (1e18, BIG + 1, False),  # an int is never a nearby float
    (BIG + 1, BIG + 1, True), (3.0, 3, True), (True, 1, True),  # Python ==
    ((1, 2), [1, 2], True),                      # a returned tuple reads as a list
    ([(1, 2)], [[1, 2]], False),                 # only the outer one
    ({"a": 1}, {"a": 1}, True), ({1: 2}, {"1": 2}, False), ([1, 2], [2, 1], False),
])
def test_lcb_call_by_hand(returned, expected, verdict):
    assert lcb_call(returned, expected) is verdict


# --- hand-worked cases, from reading rllm/rewards/code_utils/taco.py --------------------------
@pytest.mark.parametrize("output, expected, ours, false_positive", [
    ("1\n\n2\n", "1\n2", True, None),            # blank lines dropped
    ("1  2 ", "1 2", True, None), ("a  b", "a b", True, None),
    ("3.14159", "3.14159265", True, None),       # within 1e-8 + 1e-5 * |expected|
    ("0.5000001", "0.5", True, None), ("5.0", "5", True, None),
    ("3.14", "3.14159265", False, None),         # a float rounded: TACO rejects it too
    ("1 2", "2 1", False, None),                 # order within a line
    ("YES", "NO", False, "words"),               # TACO ignores differing words
    ("yes", "YES", False, "words"),
    ("1000000000000000000", "1000000000000000001", False, "integer"),  # off by one
    ("5.000001", "5", False, "integer"),         # an integer answer must be exact
    ("2\n1", "1\n2", False, "fallback"),         # TACO's set-of-lines fallback
    ("12", "1 2", False, "fallback"),            # TACO's character fallbacks
    ("1_000", "1000", False, "spelling"),        # float() spellings are not numerals here
])
def test_taco_stdio_by_hand(output, expected, ours, false_positive):
    """`false_positive`: the class of TACO's acceptance of a wrong output (None: TACO agrees)."""
    assert taco_stdio(output, expected) is ours
    if false_positive is not None:
        assert taco_false_positive(output, expected) == false_positive


@pytest.mark.parametrize("returned, expected, ours", [
    (True, [True], True), ([True], [True], True),  # TACO's wrapped results, either form
    ([1, 2], [[1, 2]], True), ((1, 2), [[1, 2]], True),
    ([(3, 0), (1, 1)], [[[3, 0], [1, 1]]], True),  # a list of tuples reads as lists
    ([(1, 1), (3, 0)], [[[3, 0], [1, 1]]], False),  # order
    ({1: "a"}, {"1": "a"}, True),                # integer-like keys read as integers
    (BIG + 1, [BIG], False), (float(BIG), [BIG + 1], False),
    (1, [1, 2, 3], False),                       # TACO takes the first of any list
])
def test_taco_call_by_hand(returned, expected, ours):
    assert taco_call(returned, expected) is ours


def test_tokens_rule_tolerance_is_exact_arithmetic():
    assert not stdio_equal("1000000000000000001", "1e18", float_tol=0.0)
    assert stdio_equal("1000000000000000001", "1e18", float_tol=1e-6)  # declared: within it
    assert stdio_equal("1e999999999", "1e999999999", float_tol=1e-6)  # no overflow, no hang
    assert not stdio_equal("1e999999999", "2e999999999", float_tol=1e-6)
    assert not values_equal(BIG + 1, 1e18, float_tol=0.0)
    assert values_equal(BIG + 1, 1e18, float_tol=1e-9)


# --- differential: the references' own verdicts -----------------------------------------------
def test_lcb_agrees_with_livecodebench_on_every_reference_pair():
    stdio = [(o, e, ref) for o, e, ref, _ in REFERENCE["stdio"]]
    calls = [(ast.literal_eval(a), json.loads(e), ref) for a, e, ref, _ in REFERENCE["call"]]
    assert len(stdio) >= 3900 and len(calls) >= 250
    assert sum(ref for *_, ref in stdio) >= 800  # both verdicts are well represented
    assert [p for p in stdio if lcb_stdio(p[0], p[1]) is not p[2]] == []
    assert [p for p in calls if lcb_call(p[0], p[1]) is not p[2]] == []


_NUMERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def _lines(text: str) -> list[list[str]]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [line.split() for line in text.split("\n") if line.strip()]


def _float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _close(a: float, e: float) -> bool:
    """numpy.isclose(a, e) with its defaults, infinities included."""
    if abs(a) == float("inf") or abs(e) == float("inf"):
        return a == e
    return abs(a - e) <= 1e-8 + 1e-5 * abs(e)


def _taco_line_rule(output: str, expected: str) -> bool:
    """TACO's `stripped_string_compare` as read: equal stripped texts; else both one float,
    close; else the same non-blank lines and tokens, where two differing tokens fail only when
    float() reads both and they are not close."""
    a, e = output.replace("\r\n", "\n").replace("\r", "\n").strip(), expected.strip()
    if a == e:
        return True
    if _float(a) is not None and _float(e) is not None:
        return _close(_float(a), _float(e))
    out, exp = _lines(a), _lines(e)
    if len(out) != len(exp) or any(len(x) != len(y) for x, y in zip(out, exp, strict=True)):
        return False
    return all(x == y or _float(x) is None or _float(y) is None or _close(_float(x), _float(y))
               for xl, yl in zip(out, exp, strict=True) for x, y in zip(xl, yl, strict=True))


def taco_false_positive(output: str, expected: str) -> str | None:
    """Which of TACO's false positives a pair TACO accepts is, or None: `fallback` (TACO's line
    rule rejects it; its character-set and line-set fallbacks took it), else, per differing
    token: `words` (one is no number to float(): TACO skips it), `spelling` (float() reads both,
    but one is no decimal numeral: inf, nan, 1_000), `integer` (an integer answer and another
    number within rtol 1e-5), `overflow` (beyond a float)."""
    if not _taco_line_rule(output, expected):
        return "fallback"
    found = set()
    for a_line, e_line in zip(_lines(output), _lines(expected), strict=True):
        for a, e in zip(a_line, e_line, strict=True):
            if a == e:
                continue
            fa, fe = _float(a), _float(e)
            if fa is None or fe is None:
                found.add("words")
            elif not (_NUMERAL.fullmatch(a) and _NUMERAL.fullmatch(e)):
                found.add("spelling")
            elif abs(fa) == float("inf") or abs(fe) == float("inf"):
                found.add("overflow")
            elif re.fullmatch(r"[+-]?\d+", e) and _differ(a, e):
                found.add("integer")
            else:
                return None  # a decimal within tolerance of a decimal: must be accepted
    return ", ".join(sorted(found)) or None


def _differ(a: str, e: str) -> bool:
    try:
        return Decimal(a) != Decimal(e)
    except InvalidOperation:
        return True


def test_taco_agrees_with_deepcoders_checker_except_its_false_positives(capsys):
    stdio = [(o, e, ref) for o, e, _, ref in REFERENCE["stdio"]]
    ours = [(o, e, ref, taco_stdio(o, e)) for o, e, ref in stdio]
    assert [p for p in ours if p[3] and not p[2]] == []  # never more lenient than TACO
    stricter = [(o, e) for o, e, ref, got in ours if ref and not got]
    classes = collections.Counter(taco_false_positive(o, e) for o, e in stricter)
    assert None not in classes, [p for p in stricter if taco_false_positive(*p) is None][:5]
    assert {c for k in classes for c in k.split(", ")} == {
        "fallback", "words", "spelling", "integer", "overflow"}
    agree = len(ours) - len(stricter)
    with capsys.disabled():
        print(f"\ntaco vs TACO: {agree} of {len(ours)} stdio pairs agree; stricter on "
              f"{len(stricter)}: {dict(classes)}")
    assert agree >= 3000


def test_taco_calls_agree_with_deepcoders_checker_except_unwrapping_long_lists():
    calls = [(ast.literal_eval(a), json.loads(e), ref) for a, e, _, ref in REFERENCE["call"]]
    differ = [(a, e, ref) for a, e, ref in calls if taco_call(a, e) is not ref]
    # TACO compares a result with expected[0] for an expected list of any length: a function
    # returning the first element of a list answer passes there. Here only a 1-element list
    # (TACO's wrapping) is unwrapped.
    assert differ and all(ref and isinstance(e, list) and len(e) > 1 and a == e[0]
                          or ref and isinstance(e, list) and len(e) > 1 and list(a) == e[0]
                          for a, e, ref in differ), differ
    assert len(calls) - len(differ) >= 245
