"""Test formats -> what the in-sandbox harness runs, and how each of its records is judged.

`plan_tests` validates `stdio`, `call` and `assert` tests (one-line `TestFormatError` otherwise)
and returns a `Plan`: the harness spec, the test inputs as marshal frames that follow it on the
harness's stdin (read one test at a time, so the harness never holds them all), and a judge
comparing one harness record with the expected value under the problem's comparison rule
(envs/code/rules.py). Expected values stay in this process; comparison is on values decoded from
strict tagged JSON (envs/code/codec.py) into builtin and `collections` types, so no object from
the candidate's process ever reaches `==` here.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from scalerl.envs.base import truncate
from scalerl.envs.code.asserts import Ref, bound_names, convert_check
from scalerl.envs.code.codec import decode
from scalerl.envs.code.rules import Rule, as_json, get_rule, is_number, stdio_equal, values_equal

__all__ = ["COMPARATORS", "Plan", "TestFormatError", "as_json", "plan_tests", "stdio_equal",
           "untag", "values_equal"]

TEST_TYPES = ("stdio", "call", "assert")
STDOUT_CAP = 4 << 20
"""Bytes of a stdio program's output kept per test; more fails that test (`output_limit`)."""

Judge = Callable[[int, Mapping[str, Any]], tuple[str, str]]


@dataclass(frozen=True)
class Plan:
    """What to run for one problem: the harness spec (sent on stdin) and how to judge records."""

    spec: dict[str, Any]
    n_tests: int
    judge: Judge
    """judge(test index, harness record) -> (pass | wrong | timeout | error, detail)."""
    rule: Rule = field(default_factory=lambda: get_rule("tokens"))
    """The comparison rule the judge applies (its run limits apply to the run)."""
    frames: bytes = b""
    """The tests' inputs, one marshal frame per test, sent on stdin after the spec."""
    largest_input: int = 0
    """Bytes of the largest test input (the harness holds one at a time)."""
    expected_bytes: int = 0
    """Size of the expected results, to size the run's output allowance."""
    budget_s: float | None = None
    """Seconds the whole run may take past start-up; None: every test's deadline added up."""

    def __post_init__(self) -> None:
        if self.budget_s is not None and not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0, got {self.budget_s!r}")


# --- comparison (the parent side; values are plain, decoded from strict JSON) ------------------
def untag(x: Any) -> Any:
    """Decode the harness's tagged JSON (envs/code/codec.py); ValueError on anything malformed."""
    return decode(x)


COMPARATORS = {
    "eq": lambda a, e, tol: values_equal(a, e),
    "eq_tuple": lambda a, e, tol: isinstance(a, list | tuple | str) and tuple(a) == e,
    "is": lambda a, e, tol: a is e,  # e is True/False/None; decoded JSON keeps their identity
    "truthy": lambda a, e, tol: bool(a),
    "falsy": lambda a, e, tol: not a,
    "abs_lt": lambda a, e, tol: is_number(a) and abs(a - e) < tol,
    "abs_le": lambda a, e, tol: is_number(a) and abs(a - e) <= tol,
}


# --- planning: test JSON -> harness spec + a judge per record ----------------------------------
class TestFormatError(ValueError):
    """Malformed tests (the data's fault): scored as `error`, with a one-line reason."""

    __test__ = False  # not a pytest class


def plan_tests(tests: Mapping[str, Any], *, timeout_s: float, float_tol: float | None,
               compare: str = "tokens") -> Plan:
    """The harness spec for `tests` and the judge that compares each record with the expected,
    under the rule the tests name (`"compare"`), else `compare`."""
    if not isinstance(tests, Mapping):
        raise TestFormatError(f"tests must be a JSON object, got {type(tests).__name__}")
    kind = tests.get("type", "call" if "fn_name" in tests else "stdio")
    if kind not in _PLANNERS:
        raise TestFormatError(f"unknown test type {kind!r}; valid: {', '.join(TEST_TYPES)}")
    try:
        rule = get_rule(tests.get("compare", compare))
    except ValueError as e:
        raise TestFormatError(str(e)) from None
    return _PLANNERS[kind](tests, timeout_s, float_tol, rule)


def _pairs(tests: Mapping[str, Any]) -> tuple[list, list]:
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TestFormatError("tests need lists `inputs` and `outputs`")
    if len(inputs) != len(outputs) or not inputs:
        raise TestFormatError(f"{len(inputs)} inputs but {len(outputs)} outputs (need >= 1 each)")
    return inputs, outputs


def _text(x: Any, what: str) -> str:
    if isinstance(x, list) and all(isinstance(s, str) for s in x):
        return "\n".join(x)  # APPS sometimes stores lines
    if not isinstance(x, str):
        raise TestFormatError(f"stdio {what} must be text, got {type(x).__name__}")
    return x


def _plan_stdio(tests: Mapping[str, Any], timeout_s: float, float_tol: float | None,
                rule: Rule) -> Plan:
    inputs, outputs = _pairs(tests)
    data = [_text(x, "input").encode("utf-8", "replace") for x in inputs]
    outputs = [_text(x, "output") for x in outputs]

    def judge(i: int, rec: Mapping[str, Any]) -> tuple[str, str]:
        status, out = rec.get("status"), rec.get("stdout")
        if status == "timeout":
            return "timeout", f"time limit {timeout_s:g} s exceeded"
        if status == "output_limit":
            return "wrong", f"printed more than {STDOUT_CAP} bytes"
        if status != "ok" or not isinstance(out, str):
            err = str(rec.get("stderr", ""))[-300:]
            return "wrong", f"exit code {rec.get('exit')}: {err}"
        if rule.stdio(out, outputs[i], float_tol):
            return "pass", ""
        return "wrong", f"expected {truncate(outputs[i], 80)!r}, got {truncate(out, 80)!r}"

    spec = {"mode": "stdio", "n": len(data), "timeout_s": timeout_s, "out_cap": STDOUT_CAP,
            "int_digits": rule.int_max_str_digits}
    return Plan(spec, len(inputs), judge, rule, b"".join(marshal.dumps(d) for d in data),
                max(map(len, data)), sum(map(len, outputs)))


def _plan_call(tests: Mapping[str, Any], timeout_s: float, float_tol: float | None,
               rule: Rule) -> Plan:
    inputs, outputs = _pairs(tests)
    fn_name = tests.get("fn_name")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TestFormatError(f"call tests need an identifier `fn_name`, got {fn_name!r}")
    if not all(isinstance(a, list) for a in inputs):
        raise TestFormatError("call test inputs must be argument lists, e.g. [[1, 2], [3, 4]]")
    unwrap = bool(tests.get("unwrap_outputs", False))
    if rule.call_args is not None:
        inputs = [rule.call_args(a) for a in inputs]

    def judge(i: int, rec: Mapping[str, Any]) -> tuple[str, str]:
        actual, why = _value(rec, timeout_s)
        if why:
            return why
        expected = outputs[i]
        ok = rule.call(actual, expected, float_tol) or (
            unwrap and isinstance(expected, list) and len(expected) == 1
            and rule.call(actual, expected[0], float_tol))
        return ("pass", "") if ok else ("wrong", _mismatch(inputs[i], expected, actual))

    return _call_plan(fn_name, str(tests.get("prelude", "")), timeout_s,
                      [{"args": a, "kwargs": {}} for a in inputs], judge, rule, _size(outputs))


def _call_plan(fn_name: str, prelude: str, timeout_s: float, calls: list[dict[str, Any]],
               judge: Judge, rule: Rule, expected_bytes: int, setup: str = "") -> Plan:
    """A `call` plan: one marshal frame per call ({args, kwargs, refs}), read one at a time;
    `setup` runs in the candidate's namespace after its code."""
    try:
        frames = [marshal.dumps(call) for call in calls]
    except ValueError as e:  # a value marshal cannot write (only plain data crosses)
        raise TestFormatError(f"call arguments must be plain data: {e}") from None
    spec = {"mode": "call", "fn_name": fn_name, "timeout_s": timeout_s, "prelude": prelude,
            "setup": setup, "n": len(calls), "int_digits": rule.int_max_str_digits}
    return Plan(spec, len(calls), judge, rule, b"".join(frames), max(map(len, frames)),
                expected_bytes)


def _size(values: list) -> int:
    return sum(len(repr(v)) for v in values)


def _plan_assert(tests: Mapping[str, Any], timeout_s: float, float_tol: float | None,
                 rule: Rule) -> Plan:
    test, entry = tests.get("test"), tests.get("entry_point")
    if not isinstance(test, str) or not isinstance(entry, str) or not entry.isidentifier():
        raise TestFormatError("assert tests need `test` (source with check()) and `entry_point`")
    prelude, setup = str(tests.get("prelude", "")), str(tests.get("setup", ""))
    names, imports = bound_names(setup)
    cases = _converted(test, names)
    if cases is None:
        return _plan_check(tests, test, entry, timeout_s, names, imports)

    def judge(i: int, rec: Mapping[str, Any]) -> tuple[str, str]:
        actual, why = _value(rec, timeout_s)
        if why:
            return why
        case = cases[i]
        if COMPARATORS[case.op](actual, case.expected, case.tol):
            return "pass", ""
        return "wrong", f"line {case.line} ({case.op}): " + _mismatch(case.args, case.expected,
                                                                    actual)

    return _call_plan(entry, prelude, timeout_s, [_call_spec(c) for c in cases], judge, rule,
                      _size([c.expected for c in cases]), setup)


def _call_spec(case: Any) -> dict[str, Any]:
    """A converted assert as the harness's call: a name the setup binds goes as a reference."""
    refs = [[i, a.name] for i, a in enumerate(case.args) if isinstance(a, Ref)]
    args = [None if isinstance(a, Ref) else a for a in case.args]
    return {"args": args, "kwargs": dict(case.kwargs), "refs": refs}


def _plan_check(tests: Mapping[str, Any], test: str, entry: str, timeout_s: float,
                names: frozenset[str], imports: str) -> Plan:
    """The two-process `check` mode: each candidate call has `timeout_s`; the whole check has
    the tests' own `run_timeout_s` (EvalPlus gives a task 60 s), else one call's deadline. The
    setup's imports join the prelude (the test uses them: MBPP's `import math`); the objects it
    builds stay in the candidate's process."""
    budget = tests.get("run_timeout_s")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                               or not budget > 0):
        raise TestFormatError(f"run_timeout_s must be a number > 0, got {budget!r}")

    def judge(i: int, rec: Mapping[str, Any]) -> tuple[str, str]:
        if rec.get("passed") is True and isinstance(rec.get("calls"), int) and rec["calls"] > 0:
            return "pass", ""
        kind = {"timeout": "timeout", "bad_test": "error"}.get(str(rec.get("kind")), "wrong")
        return kind, f"check() failed: {truncate(str(rec.get('error')), 200)}"

    spec = {"mode": "check", "fn_name": entry, "test": test, "timeout_s": timeout_s,
            "prelude": "\n".join(filter(None, [str(tests.get("prelude", "")), imports])),
            "setup": str(tests.get("setup", "")), "setup_names": sorted(names)}
    return Plan(spec, 1, judge, budget_s=float(budget) if budget is not None else None)


@lru_cache(maxsize=4096)
def _converted(test: str, names: frozenset[str]) -> tuple | None:
    cases = convert_check(test, names)
    return tuple(cases) if cases is not None else None


def _value(rec: Mapping[str, Any], timeout_s: float) -> tuple[Any, tuple[str, str] | None]:
    """(decoded value, None) for a good call record, else (None, (kind, detail))."""
    if rec.get("ok") is not True or "value" not in rec:
        if rec.get("kind") == "timeout":
            return None, ("timeout", f"time limit {timeout_s:g} s exceeded")
        error = truncate(str(rec.get("error")), 200)
        return None, ("wrong", f"{rec.get('kind', 'error')}: {error}")
    try:
        return untag(rec["value"]), None
    except (ValueError, TypeError, RecursionError) as e:
        return None, ("wrong", f"malformed result: {e}")


def _mismatch(args: Any, expected: Any, actual: Any) -> str:
    return (f"input {truncate(repr(args), 80)}: expected {truncate(repr(expected), 80)}, "
            f"got {truncate(repr(actual), 80)}")


_PLANNERS = {"stdio": _plan_stdio, "call": _plan_call, "assert": _plan_assert}
