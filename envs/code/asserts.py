"""Turn HumanEval-style `def check(candidate): assert ...` into call tests, in the parent.

Parsed with `ast`, never executed. Covered forms (arguments and expected values must be Python
literals or arithmetic on literals): `candidate(a) == lit` (either side), `tuple(candidate(a))
== tuple(lit)`, `candidate(a) is True|False|None`,
`candidate(a)`, `not candidate(a)`, `abs(candidate(a) - lit) < tol` (also `<=`, `math.fabs`,
either operand order); `assert True`, docstrings and imports are skipped. An argument that is a
name the problem's setup code binds (MBPP's `test_setup_code` builds `root = Node(1)` with the
candidate's own class) becomes a `Ref`, resolved in the candidate's process. Anything else
(loops, helpers, random inputs) returns None and the caller falls back to the two-process
`check` mode.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallCase:
    """One converted assert: call the entry point with `args`, check the result with `op`."""

    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    op: str
    """eq | eq_tuple | is | truthy | falsy | abs_lt | abs_le (envs/code/plan.py COMPARATORS)."""
    expected: Any = None
    tol: float = 0.0
    line: int = 0
    """Line of the assert in the test source, for the detail."""


@dataclass(frozen=True)
class Ref:
    """An argument that is an object the setup code built, named `name` in the candidate's
    namespace."""

    name: str
    """The name the setup binds (an identifier)."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Ref needs an identifier, got {self.name!r}")


class _NotConvertible(Exception):
    pass


def bound_names(setup: str) -> tuple[frozenset[str], str]:
    """The objects a setup source builds (top-level names it assigns, defs, classes), and its
    import statements (which the test needs too); nothing when it does not parse (the harness
    then reports the error when it runs it)."""
    try:
        tree = ast.parse(setup)
    except (SyntaxError, ValueError):
        return frozenset(), ""
    names: set[str] = set()
    imports = [ast.get_source_segment(setup, n) or "" for n in tree.body
               if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return frozenset(names), "\n".join(imports)


def convert_check(test_src: str, names: frozenset[str] = frozenset()) -> list[CallCase] | None:
    """The call cases of `check(candidate)` in `test_src`, or None when any statement resists.
    An argument naming one of `names` (bound by the setup code) becomes a `Ref`."""
    try:
        tree = ast.parse(test_src)
    except (SyntaxError, ValueError):  # ValueError: a null byte; over-long int literals
        return None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        return None
    fn = checks[0]
    cand = fn.args.args[0].arg
    cases: list[CallCase] = []
    try:
        for stmt in fn.body:
            cases.extend(_statement(stmt, cand, names))
    except _NotConvertible:
        return None
    return cases or None


def _statement(stmt: ast.stmt, cand: str, names: frozenset[str]) -> list[CallCase]:
    if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass):
        return []
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant | ast.Name):
        return []  # a docstring, a bare constant or a bare `print`
    if isinstance(stmt, ast.Expr) and _is_print(stmt.value, cand):
        return []
    if not isinstance(stmt, ast.Assert):
        raise _NotConvertible
    test = stmt.test
    if isinstance(test, ast.Constant) and test.value is True:
        return []
    return [_assertion(test, cand, stmt.lineno, names)]


def _assertion(test: ast.expr, cand: str, line: int, names: frozenset[str]) -> CallCase:
    if _is_call(test, cand):
        return _case(test, "truthy", None, line, names)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_call(test.operand,
                                                                                    cand):
        return _case(test.operand, "falsy", None, line, names)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        raise _NotConvertible
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq):
        call, other = (left, right) if _is_call(_unwrap_tuple(left), cand) else (right, left)
        if _is_call(call, cand):
            return _case(call, "eq", _literal(other), line, names)
        if _is_call(_unwrap_tuple(call), cand) and _unwrap_tuple(other) is not other:
            return _case(_unwrap_tuple(call), "eq_tuple", tuple(_literal(_unwrap_tuple(other))),
                         line, names)
        raise _NotConvertible
    if isinstance(op, ast.Is) and _is_call(left, cand):
        value = _literal(right)
        if not (value is True or value is False or value is None):
            raise _NotConvertible
        return _case(left, "is", value, line, names)
    if isinstance(op, ast.Lt | ast.LtE):
        call, expected = _abs_difference(left, cand)
        name = "abs_lt" if isinstance(op, ast.Lt) else "abs_le"
        return _case(call, name, expected, line, names, tol=_number(_literal(right)))
    raise _NotConvertible


def _unwrap_tuple(node: ast.expr) -> ast.expr:
    """`tuple(x)` -> x; anything else unchanged."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tuple"
            and len(node.args) == 1 and not node.keywords):
        return node.args[0]
    return node


def _abs_difference(node: ast.expr, cand: str) -> tuple[ast.Call, Any]:
    """`abs(candidate(a) - lit)` or `math.fabs(lit - candidate(a))` -> (call node, lit)."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
        raise _NotConvertible
    func = node.func
    is_abs = isinstance(func, ast.Name) and func.id == "abs"
    is_fabs = (isinstance(func, ast.Attribute) and func.attr == "fabs"
               and isinstance(func.value, ast.Name) and func.value.id == "math")
    inner = node.args[0]
    if not (is_abs or is_fabs) or not (isinstance(inner, ast.BinOp)
                                       and isinstance(inner.op, ast.Sub)):
        raise _NotConvertible
    if _is_call(inner.left, cand):
        return inner.left, _number(_literal(inner.right))
    if _is_call(inner.right, cand):
        return inner.right, _number(_literal(inner.left))
    raise _NotConvertible


def _is_print(node: ast.expr, cand: str) -> bool:
    """A `print(...)` that does not call the candidate (debug output in some checks)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and not any(isinstance(n, ast.Name) and n.id == cand for n in ast.walk(node)))


def _is_call(node: ast.expr, cand: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == cand)


def _case(call: ast.Call, op: str, expected: Any, line: int, names: frozenset[str],
          tol: float = 0.0) -> CallCase:
    if any(isinstance(a, ast.Starred) for a in call.args):
        raise _NotConvertible
    if any(k.arg is None for k in call.keywords):
        raise _NotConvertible
    args = tuple(Ref(a.id) if isinstance(a, ast.Name) and a.id in names else _literal(a)
                 for a in call.args)
    kwargs = tuple((k.arg, _literal(k.value)) for k in call.keywords)
    return CallCase(args=args, kwargs=kwargs, op=op, expected=expected, tol=tol, line=line)


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
          ast.Pow: operator.pow}


def _literal(node: ast.expr) -> Any:
    """A literal, or arithmetic on literals (`3 * 19`, `2.0 / 3.0`, `'ab' + 'c'`, `0 ** 0`)."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        left, right = _literal(node.left), _literal(node.right)
        if _too_big(node.op, left, right):
            raise _NotConvertible
        try:
            return _ARITH[type(node.op)](left, right)
        except (TypeError, ValueError, ArithmeticError) as e:
            raise _NotConvertible from e
    if isinstance(node, ast.Tuple | ast.List):
        items = [_literal(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise _NotConvertible from e


def _too_big(op: ast.operator, left: Any, right: Any) -> bool:
    """Refuse `9 ** 9 ** 9` and `'a' * 10**9` (the parent must not hang on a test file)."""
    if isinstance(op, ast.Pow):
        return not isinstance(right, int | float) or abs(right) > 1000
    if isinstance(op, ast.Mult) and isinstance(left, str | list | tuple | int):
        count = right if isinstance(left, str | list | tuple) else left
        return isinstance(count, int) and not isinstance(left, int) and count > 10_000
    return False


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _NotConvertible
    return value
