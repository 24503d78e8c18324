"""EvalPlus (HumanEval+, MBPP+) and MBPP tests -> the `assert` tests the code verifier runs.

EvalPlus's `test` field is kept as the dataset wrote it (its `is_floats` and `assertion` helpers,
the set-equality, not-None and 4-argument oracle helpers, `ref_func` cross-checks) with four
changes, each bringing it to what EvalPlus's own evaluator (`evalplus.eval.unsafe_execute`)
decides:
- numpy, which the sandbox lacks: `import numpy as np` binds a numpy-free stand-in whose
  `allclose` is the evaluator's float rule (same type, same length, |out - exp| <= atol + 1e-7
  |exp| per element, no broadcasting); any other numpy use is refused at load;
- HumanEval/32's assert `_poly(*candidate(*inp), inp) <= atol`, which raises for every answer,
  becomes `abs(_poly(*inp, candidate(*inp))) <= atol` (the field's fix, with the evaluator's abs);
- a not-None helper that computes `exact_match` and asserts nothing gets `assert exact_match`;
- the evaluator's oracles the field's port lacks: `are_equivalent` (Mbpp/164) accepts any
  answer, `sum_div` (Mbpp/295) accepts 0 as well.
HumanEval+'s source defines `check(candidate)`; a trailing `check(<entry point>)` is dropped (the
harness calls `check`). MBPP+'s source is module-level code calling the function by name, which
is wrapped in a `check` that runs it with that name bound to the candidate. MBPP's `assert`
lines become a `check` whose parameter is the function's own name, so literal asserts still turn
into call tests (envs/code/asserts.py). Parsing only: nothing here runs a test.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence
from contextlib import contextmanager

NUMPY_FREE = '''
def _close(a, b, rtol, atol):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
                and len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b)))
    numbers = (int, float, bool, complex)
    if type(a) not in numbers or type(b) not in numbers:
        return False
    if a == b:
        return True
    try:
        return a - a == 0 and b - b == 0 and abs(a - b) <= atol + rtol * abs(b)
    except (OverflowError, TypeError):
        return False


class _NumpyFree:
    """What EvalPlus's helpers use of numpy, without numpy."""

    class ndarray:
        pass

    float32 = float64 = float

    @staticmethod
    def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
        return type(a) is type(b) and _close(a, b, rtol, atol)

    class testing:
        @staticmethod
        def assert_allclose(actual, desired, rtol=1e-07, atol=0):
            assert type(actual) is type(desired) and _close(actual, desired, rtol, atol)


np = _NumpyFree()

'''
"""The numpy-free stand-in bound as `np` before the dataset's helpers."""
NUMPY_ATTRIBUTES = ("allclose", "ndarray", "float32", "float64", "testing")
ORACLES = {
    "are_equivalent": ("\ndef assertion(out, exp, atol):  # EvalPlus's evaluator: any answer\n"
                       "    pass\n"),
    "sum_div": ("\n_dataset_assertion = assertion\n\n\n"
                "def assertion(out, exp, atol):  # EvalPlus's evaluator: or 0\n"
                "    if not out == 0:\n        _dataset_assertion(out, exp, atol)\n"),
}
"""EvalPlus evaluator oracles that the hub's `test` lacks, by entry point (MBPP+)."""
FIND_ZERO = re.compile(r"_poly\(\s*\*\s*candidate\(\s*\*\s*inp\s*\)\s*,\s*inp\s*\)"
                       r"|(?<!abs\()_poly\(\s*\*\s*inp\s*,\s*candidate\(\s*\*\s*inp\s*\)\s*\)")
"""HumanEval/32's assert, as the hub has it (or with only the field's argument fix)."""


@contextmanager
def big_int_literals():
    """Parse sources whose literals pass Python's 4,300-digit int limit (EvalPlus wrote its
    tests with the limit raised)."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(old)


def _is_numpy_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] == "numpy" for a in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy"


def _calls_check(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "check")


def _segment(lines: Sequence[str], node: ast.stmt) -> str:
    decorators = getattr(node, "decorator_list", [])
    start = min([node.lineno, *(d.lineno for d in decorators)])
    return "".join(lines[start - 1:node.end_lineno]) + "\n"


def _numpy_beyond_helpers(nodes: Sequence[ast.stmt]) -> bool:
    allowed = {id(n.value) for k in nodes for n in ast.walk(k)
               if isinstance(n, ast.Attribute) and n.attr in NUMPY_ATTRIBUTES}
    return any(isinstance(n, ast.Name) and n.id == "np" and id(n) not in allowed
               for k in nodes for n in ast.walk(k))


def _vacuous_assertion(node: ast.stmt) -> bool:
    """An `assertion` helper that computes `exact_match` and checks nothing (MBPP+'s not-None
    helper)."""
    if not (isinstance(node, ast.FunctionDef) and node.name == "assertion"):
        return False
    walked = list(ast.walk(node))
    stores = {n.id for n in walked if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return "exact_match" in stores and not any(isinstance(n, ast.Assert | ast.Raise)
                                               for n in walked)


def _kept(node: ast.stmt, lines: Sequence[str], entry: str) -> str:
    """One top-level statement of the test, with its EvalPlus fixes."""
    text = _segment(lines, node)
    if _vacuous_assertion(node):
        text += "    assert exact_match\n"
    if isinstance(node, ast.FunctionDef) and node.name == "assertion" and entry in ORACLES:
        text += ORACLES[entry]
    if isinstance(node, ast.FunctionDef) and node.name == "check" and entry == "find_zero":
        text = FIND_ZERO.sub("abs(_poly(*inp, candidate(*inp)))", text)
    return text


def adapt_plus_test(test: str, entry: str) -> str:
    """An EvalPlus `test` source as a numpy-free source defining `check(candidate)`;
    ValueError when it does not parse or uses numpy beyond the helpers."""
    try:
        with big_int_literals():
            tree = ast.parse(test)
    except SyntaxError as exc:
        raise ValueError(f"test does not parse: {exc.msg} (line {exc.lineno})") from exc
    kept = [n for n in tree.body if not (_is_numpy_import(n) or _calls_check(n))]
    if _numpy_beyond_helpers(kept):
        raise ValueError("test uses numpy beyond its assertion helpers (no numpy in the sandbox)")
    lines = test.splitlines(keepends=True)
    body = "".join(_kept(n, lines, entry) for n in kept)
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in kept):
        return NUMPY_FREE + body  # HumanEval+: check(candidate) is there
    # MBPP+: module-level code calling `entry` by name, run with that name bound to the candidate
    return (NUMPY_FREE + "def check(candidate):\n"
            f"    namespace = dict(globals(), **{{{entry!r}: candidate}})\n"
            f"    exec(compile({body!r}, 'test.py', 'exec'), namespace)\n")
def asserts_check(asserts: Sequence[str], entry: str) -> str:
    """MBPP `assert` lines as `def check(<entry>): ...`: the parameter carries the function's
    own name, so the asserts read as calls of the candidate."""
    if not asserts:
        raise ValueError("no tests (test_list is empty)")
    body = "".join("    " + "\n    ".join(a.strip().splitlines()) + "\n" for a in asserts)
    source = f"def check({entry}):\n{body}"
    try:
        ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"test_list does not parse: {exc.msg}") from exc
    return source


def entry_point(code: str, tests: Sequence[str]) -> str:
    """The function the tests call: the first name called in them that `code` (the gold
    solution) defines at top level, else the first name called that is not a builtin."""
    called: list[str] = []
    for test in tests:
        try:
            tree = ast.parse(test.strip())
        except SyntaxError:
            continue
        called += [n.func.id for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    try:
        defined = {n.name for n in ast.parse(code).body
                   if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    except SyntaxError:
        defined = set()
    for name in called:
        if name in defined:
            return name
    import builtins

    for name in called:
        if not hasattr(builtins, name):
            return name
    raise ValueError("cannot tell which function the tests call")
