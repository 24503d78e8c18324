"""Which of a code sample's tests are public: the examples the model may be shown and re-run.

A sample's `tests` may carry a `public` key (the split is kept in the tests, additively; the
verifier ignores the key and the judge still runs every test):
- an integer n: the first n of the tests' `inputs`/`outputs` (`stdio` and `call` tests), the
  rest private. LiveCodeBench rows are loaded this way: `public_test_cases` then
  `private_test_cases` (the statement's examples, shown in the prompt, then the hidden tests;
  LiveCodeBench's own harness grades both, lcb_runner/benchmarks/code_generation.py).
- a mapping: a test spec of its own (any format the verifier takes, e.g. `assert` tests built
  from the prompt's examples), complete in itself.
- absent, null or 0: the sample has no public tests.
`public_tests` turns that into one test spec, or None. A user's code file (the verifier's own
test JSON) may carry `public` the same way.

The built-ins' public tests are what their prompts already show, so feedback on them reveals no
test the model has not been given: MBPP (`mbpp`): its `test_list` asserts, all of which the
prompt lists (they are also every judging test: MBPP has no hidden ones); MBPP+: the one MBPP
assert its prompt shows (`test_list[0]`, unless it is an import or contradicts EvalPlus's
ground truth: WRONG_ASSERTS), the EvalPlus tests private; HumanEval and HumanEval+:
the docstring's examples (`docstring_examples`), HumanEval's `check` / EvalPlus's base + plus
inputs private. Nothing here runs code: examples are parsed with `ast`, never executed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scalerl.envs.code.plan import TestFormatError

PUBLIC_KEY = "public"
SEPARATORS: tuple[str, ...] = ("==>", "=>", "➞", "->", "→", "==", "should return", "returns",
                               "return")
"""What the docstrings write between an example call and its result (HumanEval's styles:
`f(x) ==> y`, `f(x) ➞ y`, `f(x) == y`, `f(x) should return y`); a bare `=` is left out (it
also writes definitions, e.g. HumanEval/130's `tri(1) = 3`)."""
FLOAT_TOL = 1e-6
"""A float result is compared within this absolute tolerance (the docstring prints it rounded)."""
WRONG_EXAMPLES: frozenset[str] = frozenset({
    "median([-10, 4, 6, 1000, 10, 20])",  # HumanEval/47: the docstring says 15.0, tests 8.0
    "sort_array([1, 5, 2, 3, 4])",        # HumanEval/116: the docstring's orders are not
    "sort_array([-2, -3, -4, -5, -6])",   #   the binary-ones order its tests check
    'bf("Earth", "Mercury")',             # HumanEval/148: ("Venus") is a str, tests want a tuple
})
"""Docstring examples that contradict the problem's own tests (and canonical solution), left
out so feedback never calls a correct program wrong (found by running every canonical solution
on its examples: tests/envs/code/test_feedback.py re-checks it)."""
WRONG_ASSERTS: frozenset[str] = frozenset({
    "assert sum_div(8)==7",  # Mbpp/295: MBPP+'s ground truth sums every divisor (15)
})
"""MBPP asserts that MBPP+ prompts show but EvalPlus's corrected ground truth contradicts, left
out of MBPP+'s public tests. Found on the fixture rows only (tests/data/evalplus): the full set
was not checked here (no copy of it on this machine), so others may remain."""


def public_tests(tests: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The public part of `tests` as a test spec of its own, or None when it has none;
    TestFormatError (one line) for a malformed `public`."""
    if not isinstance(tests, Mapping):
        return None
    public = tests.get(PUBLIC_KEY)
    if public is None or public == 0 and not isinstance(public, bool):
        return None
    if isinstance(public, Mapping):
        if PUBLIC_KEY in public:
            raise TestFormatError("public tests may not carry their own `public`")
        return dict(public)
    if isinstance(public, bool) or not isinstance(public, int) or public < 0:
        raise TestFormatError(f"tests' `public` must be a count >= 0 or a test spec, "
                              f"got {public!r}")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TestFormatError("a public count needs `inputs` and `outputs` lists (stdio or call "
                              "tests); give `public` as a test spec for other formats")
    if public > min(len(inputs), len(outputs)):
        raise TestFormatError(f"public count {public} exceeds the {len(inputs)} tests")
    spec = {k: v for k, v in tests.items() if k != PUBLIC_KEY}
    spec["inputs"], spec["outputs"] = inputs[:public], outputs[:public]
    return spec


def with_public(tests: Mapping[str, Any], public: int | Mapping[str, Any] | None
                ) -> dict[str, Any]:
    """`tests` with its public part recorded (a loader's one line); None records nothing."""
    out = dict(tests)
    if public is not None:
        out[PUBLIC_KEY] = dict(public) if isinstance(public, Mapping) else public
    return out


def prompt_asserts(statements: Sequence[str], shown: int) -> list[str]:
    """The asserts among the first `shown` test statements a prompt lists (not an `import
    math` line), less WRONG_ASSERTS."""
    return [a for a in statements[:shown]
            if a.lstrip().startswith("assert") and a.strip() not in WRONG_ASSERTS]


def assert_tests(asserts: Sequence[str], entry: str, **extra: Any) -> dict[str, Any] | None:
    """An `assert` test spec whose check runs `asserts` (statements calling `entry` by name),
    or None for no asserts. `extra`: the spec's other keys (prelude, setup, timeout_s)."""
    if not asserts:
        return None
    body = "".join("    " + "\n    ".join(a.strip().splitlines()) + "\n" for a in asserts)
    return {"type": "assert", "entry_point": entry, "test": f"def check({entry}):\n{body}",
            **extra}


def docstring_examples(prompt: str, entry: str) -> list[str]:
    """The examples of `entry` that `prompt` (a function stub and its docstring) shows, as
    assert statements: a call of `entry` on literal arguments followed by its literal result,
    either on the same line after one of `SEPARATORS` or, doctest style, on the lines after a
    `>>>` line. Float results compare within FLOAT_TOL. Lines that are not such a pair are
    skipped (prose examples, calls on variables, printed output); WRONG_EXAMPLES are left out."""
    lines = prompt.splitlines()
    out = []
    for k, line in enumerate(lines):
        found = _example(line, _want(lines[k + 1:]), entry)
        if found is not None and found[0] not in WRONG_EXAMPLES:
            call, expected = found
            if isinstance(expected, float):
                out.append(f"assert abs({call} - {expected!r}) < {FLOAT_TOL!r}")
            else:
                out.append(f"assert {call} == {expected!r}")
    return out


def _want(following: Sequence[str]) -> str:
    """Doctest's expected output after a `>>>` line: the lines up to a blank one, the next
    `>>>` or the docstring's closing quotes."""
    want = []
    for line in following:
        text = line.strip()
        if not text or text.startswith(">>>") or text.startswith(('"""', "'''")):
            break
        want.append(text.removesuffix('"""').removesuffix("'''"))
    return "\n".join(want)


def _example(line: str, following: str, entry: str) -> tuple[str, Any] | None:
    """(call text, expected value) of one docstring line, or None."""
    match = re.search(r"(?<![\w.])" + re.escape(entry) + r"\(", line)
    end = _closing(line, match.end() - 1) if match else None
    if match is None or end is None:
        return None
    call = line[match.start():end]
    if not _literal_call(call):
        return None
    rest = line[end:].strip()
    for sep in SEPARATORS:
        if rest.startswith(sep):
            return _with_value(call, rest[len(sep):].strip().rstrip(".,;"))
    if not rest and line.lstrip().startswith(">>>"):
        return _with_value(call, following) if following else None
    return None


def _closing(line: str, open_at: int) -> int | None:
    """Index after the bracket that closes the one at `open_at`, skipping brackets inside
    string literals; None when it is not closed on this line."""
    depth, i, quote = 0, open_at, None
    while i < len(line):
        c = line[i]
        if quote is not None:
            i += 2 if c == "\\" else 1
            quote = None if c == quote else quote
            continue
        if c in "'\"":
            quote = c
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if depth == 0:
            return i + 1
        i += 1
    return None


def _literal_call(call: str) -> bool:
    try:
        node = ast.parse(call, mode="eval").body
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            ast.literal_eval(arg)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return False
    return not any(isinstance(a, ast.Starred) for a in node.args) and all(
        k.arg for k in node.keywords)


def _with_value(call: str, text: str) -> tuple[str, Any] | None:
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return call, value
