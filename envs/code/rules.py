"""Comparison rules of the code verifier, by name: when a test's result equals the expected one.

A `Rule` judges a stdio test (the program's stdout text against the expected text) and a call
test (the returned value, decoded from the harness's plain JSON, against the expected JSON
value), and says what the reference harness gives a whole run. A task picks one with the code
kind's `compare` option; a test JSON's `"compare"` picks one for that problem (DeepCoder mixes
two). Registered here:
- `tokens` (the default): per line, whitespace-tokenised, case-sensitive, trailing blank lines
  ignored; with a declared `float_tol`, numbers may differ by that much (relative or absolute),
  computed exactly (no float rounding of big integers).
- `lcb`: LiveCodeBench's checker (lcb_runner/evaluation/testing_util.py, `grade_stdio` and
  `grade_call_based`): stripped lines, the same line count, each line equal as text or else every
  token equal as a `Decimal`; a call result equal by Python `==` (a tuple read as a list).
- `taco`: the TACO checker DeepCoder's reward runs on its taco and primeintellect rows
  (rllm/rewards/code_utils/taco.py, `compare_std_results` and `execute_cb_code`): blank lines
  dropped, lines stripped and split into tokens, numbers within numpy's default `isclose`; a call
  result equal to the expected list or to its single element. Without that checker's false
  positives: differing words, integer answers off by a relative 1e-5, and its character-set and
  line-set fallbacks are all wrong here.
Pure functions on plain values; nothing runs here and no object of a candidate reaches them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any

RULE_NAMES: tuple[str, ...] = ("tokens", "lcb", "taco")
"""The rules registered below (a test keeps this equal to `RULES`)."""
LCB_INT_DIGITS = 50_000
"""LiveCodeBench's `sys.set_int_max_str_digits(50000)` (compute_code_generation_metrics.py)."""
TACO_RTOL, TACO_ATOL = 1e-5, 1e-8
"""numpy.isclose's defaults, which the TACO checker uses: |out - expected| <= atol + rtol|exp|."""
_EXACT = Context(prec=60, Emax=MAX_EMAX, Emin=MIN_EMIN)
"""Tolerance arithmetic on Decimals: 60 digits, any exponent (no float rounding, no overflow)."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


@dataclass(frozen=True)
class Rule:
    """How one benchmark's harness decides that a result is the expected one."""

    name: str
    """What `compare` names (a code task option, or a test JSON's field)."""
    stdio: Callable[[str, str, float | None], bool]
    """stdio(program output, expected output, float_tol) -> equal; float_tol is the task's
    declared tolerance (None: none declared), used by `tokens` only."""
    call: Callable[[Any, Any, float | None], bool]
    """call(returned value, expected value, float_tol) -> equal."""
    run_wall_s: Callable[[int, float], float] | None = None
    """(tests, per-test seconds) -> the whole run's wall limit as the reference harness sets it;
    None: the verifier's own (start-up plus every deadline, capped by the sandbox settings)."""
    int_max_str_digits: int | None = None
    """The candidate's int <-> str digit limit (None: Python's default, 4,300)."""
    call_args: Callable[[list], list] | None = None
    """How the reference harness rewrites a call's arguments before the call (None: as is)."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Rule name must be an identifier, got {self.name!r}")
        if self.int_max_str_digits is not None and self.int_max_str_digits < 640:
            raise ValueError(f"Rule {self.name}: int_max_str_digits must be >= 640 (Python's "
                             f"minimum) or None, got {self.int_max_str_digits}")


RULES: dict[str, Rule] = {}


def register_rule(rule: Rule) -> Rule:
    if rule.name in RULES:
        raise ValueError(f"comparison rule {rule.name!r} is already registered")
    RULES[rule.name] = rule
    return rule


def get_rule(name: Any) -> Rule:
    """The rule named `name`; ValueError naming the valid ones otherwise."""
    if not isinstance(name, str) or name not in RULES:
        raise ValueError(f"unknown comparison rule {name!r}; valid: {', '.join(RULES)}")
    return RULES[name]


# --- numbers ----------------------------------------------------------------------------------
def is_number(x: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _decimal(text: str) -> Decimal | None:
    """The finite Decimal a token spells (as `Decimal()` reads it), else None."""
    try:
        value = Decimal(text)
    except (ArithmeticError, ValueError):
        return None
    return value if value.is_finite() else None


def within(actual: Decimal, expected: Decimal, tol: float) -> bool:
    """math.isclose's rule (relative or absolute, both `tol`), computed exactly; 0: equality."""
    if tol == 0:
        return actual == expected
    size = max(_EXACT.abs(actual), _EXACT.abs(expected))
    bound = max(_EXACT.multiply(Decimal(tol), size), Decimal(tol))
    return _EXACT.abs(_EXACT.subtract(actual, expected)) <= bound


# --- tokens: the verifier's own rule ------------------------------------------------------------
def stdio_equal(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """Per line, whitespace-tokenised, case-sensitive; trailing blank lines and spaces ignored;
    with `float_tol`, two numeric tokens may differ by that much (`within`)."""
    a_lines, e_lines = actual.strip().split("\n"), expected.strip().split("\n")
    if len(a_lines) != len(e_lines):
        return False
    for a_line, e_line in zip(a_lines, e_lines, strict=True):
        a_tok, e_tok = a_line.split(), e_line.split()
        if len(a_tok) != len(e_tok):
            return False
        pairs = zip(a_tok, e_tok, strict=True)
        if not all(a == e or _tokens_close(a, e, float_tol) for a, e in pairs):
            return False
    return True


def _tokens_close(a: str, e: str, tol: float | None) -> bool:
    if tol is None:
        return False
    da, de = _decimal(a), _decimal(e)
    return da is not None and de is not None and within(da, de, tol)


def as_json(x: Any) -> Any:
    """JSON's view of a value (tuples become lists), for tests whose outputs came from JSON."""
    if isinstance(x, list | tuple):
        return [as_json(v) for v in x]
    if isinstance(x, dict):
        return {k: as_json(v) for k, v in x.items()}
    return x


def values_equal(actual: Any, expected: Any, float_tol: float | None = None) -> bool:
    """`==` on plain values; with `float_tol`, numbers of which one is a float compare with
    `within` (exactly: 10**18 + 1 is not 1e18 at tolerance 0)."""
    if float_tol is None:
        return bool(actual == expected)
    if is_number(actual) and is_number(expected) and (isinstance(actual, float)
                                                      or isinstance(expected, float)):
        return within(Decimal(actual), Decimal(expected), float_tol)
    if isinstance(actual, list | tuple) and isinstance(expected, list | tuple):
        pairs = zip(actual, expected, strict=False)
        return (type(actual) is type(expected) and len(actual) == len(expected)
                and all(values_equal(a, e, float_tol) for a, e in pairs))
    return bool(actual == expected)


def _tokens_call(actual: Any, expected: Any, float_tol: float | None) -> bool:
    return values_equal(as_json(actual), expected, float_tol)


# --- lcb: LiveCodeBench ---------------------------------------------------------------------
def lcb_stdio(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """LiveCodeBench's `grade_stdio`: stripped lines (blank ones inside count), the same number,
    and each line equal as text or, token by token, as Decimals (`1.0` is `1`, `1e0` is `1`;
    words never differ; any token that is not a number makes a differing line wrong)."""
    a_lines, e_lines = _stripped_lines(actual), _stripped_lines(expected)
    if len(a_lines) != len(e_lines):
        return False
    return all(a == e or _decimal_line_equal(a, e)
               for a, e in zip(a_lines, e_lines, strict=True))


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimal_line_equal(a: str, e: str) -> bool:
    try:
        return [Decimal(t) for t in a.split()] == [Decimal(t) for t in e.split()]
    except (ArithmeticError, ValueError):  # a word, or a signalling NaN in the comparison
        return False


def lcb_call(actual: Any, expected: Any, float_tol: float | None = None) -> bool:
    """LiveCodeBench's `grade_call_based`: a returned tuple is read as a list, then Python `==`
    with the JSON-decoded expected value (an int is never a nearby float)."""
    if isinstance(actual, tuple):
        actual = list(actual)
    return bool(actual == expected)


def _lcb_wall(n_tests: int, per_test_s: float) -> float:
    """compute_code_generation_metrics.py's global timeout: (timeout + 1) * tests + 5."""
    return (per_test_s + 1.0) * n_tests + 5.0


# --- taco: DeepCoder's TACO checker, without its false positives ----------------------------
def taco_stdio(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """The TACO checker's line rule (`stripped_string_compare`): blank lines dropped, lines
    stripped, the same number of lines and of tokens per line, each token equal as text or as a
    number (`taco_numbers_equal`). The output's line ends are read as `subprocess.run(text=True)`
    reads them (`\\r\\n` and `\\r` end a line)."""
    actual = actual.replace("\r\n", "\n").replace("\r", "\n")
    a_lines, e_lines = _nonblank_lines(actual), _nonblank_lines(expected)
    if len(a_lines) != len(e_lines):
        return False
    for a_line, e_line in zip(a_lines, e_lines, strict=True):
        a_tok, e_tok = a_line.split(), e_line.split()
        if len(a_tok) != len(e_tok):
            return False
        if not all(a == e or taco_numbers_equal(a, e) for a, e in zip(a_tok, e_tok, strict=True)):
            return False
    return True


def _nonblank_lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def taco_numbers_equal(actual: str, expected: str) -> bool:
    """Two decimal numerals: equal in value when the expected one is an integer, else within
    numpy.isclose's default tolerance of it (as TACO computes it, in floats)."""
    if not (_NUMBER.fullmatch(actual) and _NUMBER.fullmatch(expected)):
        return False
    if _INTEGER.fullmatch(expected):
        return Decimal(actual) == Decimal(expected)
    a, e = float(actual), float(expected)
    return math.isfinite(a) and math.isfinite(e) and abs(a - e) <= TACO_ATOL + TACO_RTOL * abs(e)


def taco_call(actual: Any, expected: Any, float_tol: float | None = None) -> bool:
    """`execute_cb_code`: a returned tuple is read as a list; equal to the expected value, or to
    the single element of an expected list (TACO stores each call's result wrapped in a list),
    or, for a list of tuples, as a list of lists. An expected dict whose keys all read as
    integers gets integer keys (TACO's `process_input_output`)."""
    expected = _int_keyed(expected)
    if isinstance(actual, tuple):
        actual = list(actual)
    if actual == expected:
        return True
    if not (isinstance(expected, list) and len(expected) == 1):
        return False
    if actual == expected[0]:
        return True
    return (isinstance(actual, list) and bool(actual) and isinstance(actual[0], tuple)
            and [list(x) for x in actual] == expected[0])


def _int_keyed(value: Any) -> Any:
    """TACO's `process_input_output` on an expected value: a dict, or a one-element list of a
    dict, with keys that all read as integers, becomes [that dict with integer keys] (TACO also
    cuts a longer list of dicts to its first; not here)."""
    first = value if isinstance(value, dict) else (
        value[0] if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict)
        else None)
    if first is None:
        return value
    try:
        return [{int(k): v for k, v in first.items()}]
    except (TypeError, ValueError):
        return value


def taco_args(args: list) -> list:
    """`process_input_output` on a call's arguments: a first dict argument whose keys all read
    as integers gets integer keys (TACO then drops the other arguments; they are kept here)."""
    if args and isinstance(args[0], dict):
        try:
            return [{int(k): v for k, v in args[0].items()}, *args[1:]]
        except (TypeError, ValueError):
            return args
    return args


register_rule(Rule("tokens", stdio_equal, _tokens_call))
register_rule(Rule("lcb", lcb_stdio, lcb_call, run_wall_s=_lcb_wall,
                   int_max_str_digits=LCB_INT_DIGITS))
register_rule(Rule("taco", taco_stdio, taco_call, run_wall_s=_lcb_wall, call_args=taco_args))
