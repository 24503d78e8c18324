"""EvalPlus (HumanEval+, MBPP+) and MBPP tests -> the `assert` tests the code verifier runs.

EvalPlus's `test` field imports numpy for its `assertion` helper (exact match, else
`np.testing.assert_allclose` for float results); the sandbox's Python has no numpy, so the
helpers are replaced here by pure-Python ones with the same rule (exact `==`; floats within atol
+ 1e-7 relative, atol 1e-6 when the test gives 0). HumanEval+'s source defines
`check(candidate)` and ends with `check(<entry point>)`, which is dropped (the harness calls
`check`); MBPP+'s source is module-level code calling the function by name, which is wrapped in
a `check` that runs it with that name bound to the candidate. MBPP's `assert` lines become a
`check` whose parameter is the function's own name, so literal asserts still turn into call
tests (envs/code/asserts.py). Parsing only: nothing here runs a test.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

HELPERS = '''
def is_floats(x):
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    return False


def _allclose(out, exp, atol, rtol=1e-07):
    if isinstance(exp, (list, tuple)):
        return (isinstance(out, (list, tuple)) and len(out) == len(exp)
                and all(_allclose(o, e, atol, rtol) for o, e in zip(out, exp)))
    try:
        return abs(out - exp) <= atol + rtol * abs(exp)
    except TypeError:
        return out == exp


def assertion(out, exp, atol):
    exact_match = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        assert _allclose(out, exp, atol), f"{out!r} is not within {atol} of {exp!r}"
    else:
        assert exact_match, f"{out!r} != {exp!r}"

'''
"""numpy-free `is_floats` / `assertion`, the rule of EvalPlus's own helpers."""
_REPLACED = ("is_floats", "assertion")
_NUMPY = ("numpy", "np")


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


def adapt_plus_test(test: str, entry: str) -> str:
    """An EvalPlus `test` source as a numpy-free source defining `check(candidate)`;
    ValueError when it does not parse or uses numpy beyond the helpers."""
    try:
        tree = ast.parse(test)
    except SyntaxError as exc:
        raise ValueError(f"test does not parse: {exc.msg} (line {exc.lineno})") from exc
    lines = test.splitlines(keepends=True)
    kept, defines_check = [], False
    for node in tree.body:
        replaced = isinstance(node, ast.FunctionDef) and node.name in _REPLACED
        if _is_numpy_import(node) or replaced or _calls_check(node):
            continue
        defines_check |= isinstance(node, ast.FunctionDef) and node.name == "check"
        kept.append(node)
    if any(isinstance(n, ast.Name) and n.id in _NUMPY for k in kept for n in ast.walk(k)):
        raise ValueError("test uses numpy beyond its assertion helpers (no numpy in the sandbox)")
    body = "".join(_segment(lines, n) for n in kept)
    if defines_check:  # HumanEval+: check(candidate) is there
        return HELPERS + body
    # MBPP+: module-level code calling `entry` by name, run with that name bound to the candidate
    return (HELPERS + "def check(candidate):\n"
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
