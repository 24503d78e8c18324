"""Graded code verdicts (`options: {partial_credit: true}`): the credit is the fraction of tests
passed, in the real sandbox (this machine's best backend); status stays all-or-nothing, an
`error` carries no credit, and without the option nothing is graded."""

from __future__ import annotations

import pytest

from scalerl.envs.code.verifier import score_code
from scalerl.envs.grading import Grading

TESTS = {"type": "call", "fn_name": "f", "inputs": [[-7], [0], [3], [5], [8]],
         "outputs": [-48, 1, 22, 36, 57]}  # f(x) = 7x + 1, a synth_code sample's tests
SANDBOX = Grading().sandbox


def fenced(body: str) -> str:
    return f"```python\n{body}\n```"


@pytest.mark.parametrize(("program", "status", "credit"), [
    ("def f(x):\n    return 7 * x + 1", "correct", 1.0),
    ("def f(x):\n    return 7 * x + 1 if x > 2 else 0", "wrong", 0.6),  # 3, 5, 8 pass
    ("def f(x):\n    return 0", "wrong", 0.0),
    ("def f(x):\n    while x > 4:\n        pass\n    return 7 * x + 1", "timeout", 0.6),
])
def test_the_credit_is_the_fraction_of_tests_passed(program, status, credit):
    graded = score_code(fenced(program), TESTS, sandbox=SANDBOX, partial_credit=True,
                        test_timeout_s=1.0)
    assert (graded.status, graded.reward) == (status, credit), graded.detail
    plain = score_code(fenced(program), TESTS, sandbox=SANDBOX, test_timeout_s=1.0)
    assert (plain.status, plain.reward) == (status, None)  # not graded unless asked


def test_no_code_earns_nothing_and_a_broken_test_is_an_error_without_credit():
    assert score_code("no code here", TESTS, sandbox=SANDBOX, partial_credit=True).reward == 0.0
    broken = score_code(fenced("def f(x):\n    return x"), {"type": "call", "inputs": [[1]]},
                        sandbox=SANDBOX, partial_credit=True)
    assert broken.status == "error" and broken.reward is None
