"""envs/bench/evalplus.py: the numpy-free `np` against real numpy, and each fix of EvalPlus's
`test` sources (find_zero, the vacuous not-None helper, the evaluator-only oracles, big integer
literals, the older `np.testing.assert_allclose` layout). The adapted sources run in-process
here (they are the datasets' own test code, not a candidate's)."""

from __future__ import annotations

import bench_fixtures as bf
import numpy
import pytest

from scalerl.envs.bench.evalplus import NUMPY_FREE, adapt_plus_test

ROWS = {r["task_id"]: r for r in bf.MBPP_PLUS + bf.HUMANEVAL_PLUS}


def numpy_free():
    namespace: dict = {}
    exec(NUMPY_FREE, namespace)
    return namespace["np"]


@pytest.mark.parametrize("out, exp, atol", [
    (1.0, 1.0 + 1e-7, 1e-6), (1.0, 1.1, 1e-6), ([1.0, 2.0], [1.0, 2.0 + 5e-7], 1e-6),
    ([1.0, 2.0], [1.0, 2.1], 1e-6), ((3.0, 4.0), (3.0, 4.00001), 1e-4), (5, 5.00005, 1e-4),
    (float("inf"), float("inf"), 1e-6), (float("inf"), float("-inf"), 1e-6),
    (float("nan"), float("nan"), 1e-6),
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0000001]], 1e-6),
    (1e308, -1e308, 1e-6), (complex(1, 1), complex(1, 1 + 1e-9), 1e-6), (True, 1.0, 1e-6),
    (1e-7, 0.0, 1e-6), (0.0, 1e-5, 1e-6),
])
def test_allclose_agrees_with_numpy_on_same_shaped_values(out, exp, atol):
    ours = numpy_free().allclose(out, exp, rtol=1e-07, atol=atol)
    same_type = type(out) is type(exp)
    reference = bool(numpy.allclose(out, exp, rtol=1e-07, atol=atol))
    assert ours == (same_type and reference)  # plus EvalPlus's evaluator's type check


@pytest.mark.parametrize("out, exp", [
    ([0.5], [0.5, 0.5]),  # numpy broadcasts; EvalPlus's evaluator checks the length first
    (0.5, [0.5, 0.5]), ((1.0, 2.0), [1.0, 2.0]), ([5.0], []), ("a", "b"), (None, 1.0),
    ({1.0}, {1.0 + 1e-9}),
])
def test_allclose_refuses_what_the_evaluator_refuses(out, exp):
    assert not numpy_free().allclose(out, exp, rtol=1e-07, atol=1e-6)


def run_check(test: str, entry: str, candidate) -> None:
    namespace: dict = {}
    exec(compile(adapt_plus_test(test, entry), "check.py", "exec"), namespace)
    namespace["check"](candidate)


def test_find_zero_is_fixed_with_the_evaluators_abs():
    row = ROWS["HumanEval/32"]
    assert "_poly(*candidate(*inp), inp)" in row["test"]  # the hub's bug, kept in the fixture
    adapted = adapt_plus_test(row["test"], "find_zero")
    assert "abs(_poly(*inp, candidate(*inp))) <= 0.0001" in adapted
    field = row["test"].replace("_poly(*candidate(*inp), inp)", "_poly(*inp, candidate(*inp))")
    assert "abs(_poly(*inp, candidate(*inp))) <= 0.0001" in adapt_plus_test(field, "find_zero")
    with pytest.raises(AssertionError):  # -1e9 makes many of these polynomials very negative
        run_check(row["test"], "find_zero", lambda xs: -1e9)


def test_the_vacuous_not_none_helper_asserts():
    row = ROWS[737]  # check_str: the hub's helper computes exact_match and asserts nothing
    assert "assert" not in row["test"].split("def assertion")[1].split("inputs =")[0]
    run_check(row["test"], "check_str", lambda s: "match" if s[:1] in "aeiouAEIOU" else None)
    with pytest.raises(AssertionError):
        run_check(row["test"], "check_str", lambda s: None)


def test_the_evaluators_own_oracles_for_mbpp_164_and_295():
    run_check(ROWS[164]["test"], "are_equivalent", lambda a, b: "anything")
    run_check(ROWS[295]["test"], "sum_div", lambda n: 0)
    with pytest.raises(AssertionError):
        run_check(ROWS[295]["test"], "sum_div", lambda n: 1)


def test_big_integer_literals_parse_and_run_in_the_sandbox():
    from scalerl.envs.code.verifier import score_code

    test = f"def check(candidate):\n    assert candidate() == {'7' * 5000}\n"
    tests = {"type": "assert", "entry_point": "f", "test": adapt_plus_test(test, "f")}
    right = "def f():\n    return 7 * (10 ** 5000 - 1) // 9"
    assert score_code(f"```python\n{right}\n```", tests).status == "correct"
    assert score_code(f"```python\n{right} + 1\n```", tests).status == "wrong"


def test_the_older_assert_allclose_layout_runs_numpy_free():
    test = (bf.EVALPLUS_HEADER + "\ndef check(candidate):\n    for inp, exp in [([1], 0.5)]:\n"
            "        assertion(candidate(*inp), exp, 1e-6)\n\ncheck(halve)\n")
    adapted = adapt_plus_test(test, "halve")
    assert "import numpy" not in adapted and "check(halve)" not in adapted
    run_check(test, "halve", lambda x: x / 2 + 1e-9)
    with pytest.raises(AssertionError):
        run_check(test, "halve", lambda x: x / 2 + 1e-3)
