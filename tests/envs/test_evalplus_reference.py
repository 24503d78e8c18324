"""scalerl's MBPP+ / HumanEval+ verdicts against EvalPlus's own evaluator, on the same programs.

Rows: tests/data/evalplus (the hub's schema and layout, every EvalPlus task variant: exact,
float atol, set equality, not-None, the 4-argument oracles of Mbpp/558 and Mbpp/581, the
evaluator-only oracles of Mbpp/164 and Mbpp/295, ref_func cross-checks, find_zero, Counter,
inf, complex, regex matches and big-integer results). Programs: each task's canonical solution
and MUTANTS of it (near misses: off by one, reversed, a list for a tuple, a set, a rounded or
nudged float, None, the answer as text). The reference verdict is `evalplus.eval.untrusted_check`
(evalplus 0.3.1 from PyPI) on the test's own inputs, its expected results (or the canonical
solution's, run by evalplus's `trusted_exec`, for cross-checks) and atol; scalerl's is
`score_code` in the real sandbox. They must agree on every pair, and no program EvalPlus rejects
may score `correct`. find_zero: evalplus 0.3.1's `unsafe_execute` never counts a find_zero input
as passed (fixed upstream after the release, "record results before continue"), so there the
reference is the package's `_poly` oracle under the evaluator's rule, `abs(_poly(*inp, out)) <=
atol`. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import ast
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scalerl.envs.bench.code_sets import humaneval_plus_row, mbpp_plus_row
from scalerl.envs.code.verifier import score_code

evalplus_eval = pytest.importorskip(
    "evalplus.eval", reason="evalplus is the reference: make install puts it in "
                            "(pip install --no-deps evalplus==0.3.1)")
from evalplus.eval._special_oracle import _poly  # noqa: E402
from evalplus.gen.util import trusted_exec  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "evalplus"
MUTANTS = {
    "reference": "return out",
    "off_by_one": "if type(out) is bool:\n        return not out\n"
                  "    return out + 1 if type(out) in (int, float) else out",
    "reversed": "return out[::-1] if isinstance(out, (list, tuple, str)) else out",
    "as_list": "return list(out) if isinstance(out, (tuple, set)) else out",
    "as_set": "return set(out) if isinstance(out, (list, tuple)) else out",
    "rounded": "return round(out, 2) if type(out) is float else out",
    "nudged": "return out * (1 + 3e-8) if type(out) is float else out",
    "none": "return None",
    "as_text": "return str(out)",
}
"""Each a body for `_mutate(out)`, applied to the canonical solution's result."""


def rows(name):
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


def mutant(code: str, entry: str, body: str) -> str:
    return (f"{code}\n\n_reference = {entry}\n\n\ndef _mutate(out):\n    {body}\n\n\n"
            f"def {entry}(*args):\n    return _mutate(_reference(*args))\n")


def data_of(test: str) -> tuple[list, list | None, float]:
    """The test's inputs, its results (None for a cross-check) and its atol."""
    values, atol = {}, None
    for node in ast.walk(ast.parse(test)):
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("inputs", "results"):
            expr = ast.Expression(node.value)
            values[target.id] = eval(compile(expr, "test", "eval"), {"inf": math.inf})
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "assertion":
            atol = ast.literal_eval(node.args[-1])
        if isinstance(node, ast.Compare) and getattr(node.left, "func", None) is not None \
                and getattr(node.left.func, "id", "") == "_poly":
            atol = ast.literal_eval(node.comparators[0])  # find_zero's `... <= atol`
    return values["inputs"], values.get("results"), atol


def evalplus_passes(dataset: str, program: str, reference: str, entry: str, test: str) -> bool:
    inputs, results, atol = data_of(test)
    expected, ref_time = trusted_exec(reference, inputs, entry, record_time=True)
    if entry == "find_zero":
        return _find_zero_passes(program, inputs, atol)
    stat, _ = evalplus_eval.untrusted_check(
        dataset, program, inputs, entry, expected=results if results is not None else expected,
        atol=atol, ref_time=ref_time, fast_check=True)
    return stat == evalplus_eval.PASS


def _find_zero_passes(program: str, inputs: list, atol: float) -> bool:
    namespace: dict = {}
    exec(program, namespace)  # the test's own mutants of the canonical solution
    try:
        return all(abs(_poly(*inp, namespace["find_zero"](*inp))) <= atol for inp in inputs)
    except Exception:
        return False


def pairs(name: str):
    for row in rows(name):
        if name == "mbppplus":
            sample, code, dataset = mbpp_plus_row(row, "mbpp+"), row["code"], "mbpp"
        else:
            sample = humaneval_plus_row(row, "humaneval+")
            code, dataset = row["prompt"] + row["canonical_solution"], "humaneval"
        entry = sample.tests["entry_point"]
        for mname, body in MUTANTS.items():
            yield sample, dataset, code, entry, mname, mutant(code, entry, body), row["test"]


def compare(name: str) -> list[tuple]:
    def one(pair):
        sample, dataset, code, entry, mname, program, test = pair
        ours = score_code(f"```python\n{program}\n```", sample.tests)
        theirs = evalplus_passes(dataset, program, code, entry, test)
        return sample.id, mname, theirs, ours

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, list(pairs(name))))


@pytest.fixture(scope="module", params=["mbppplus", "humanevalplus"])
def verdicts(request):
    return request.param, compare(request.param)


def test_scalerl_agrees_with_evalplus_on_every_program(verdicts):
    name, found = verdicts
    disagree = [(i, m, theirs, ours.status, ours.detail[:120]) for i, m, theirs, ours in found
                if theirs != (ours.status == "correct")]
    assert disagree == [], disagree
    assert not [s for *_, s in found if s.status == "error"]
    passed = sum(theirs for _, _, theirs, _ in found)
    print(f"\n{name}: {len(found)} (program, test) pairs, EvalPlus passes {passed}, "
          f"fails {len(found) - passed}; scalerl agrees on all")
    assert len(found) >= {"mbppplus": 200, "humanevalplus": 140}[name]
    assert 0.25 < passed / len(found) < 0.75  # both verdicts are well represented


def test_near_misses_are_never_correct(verdicts):
    """Every mutant EvalPlus rejects (off by one on big integers, wrong order, a rounded float,
    None for a match...) is rejected here too, and the canonical solution always passes."""
    _, found = verdicts
    rejected = [(i, m, ours.status) for i, m, theirs, ours in found if not theirs]
    assert rejected and all(status != "correct" for *_, status in rejected), rejected
    assert all(ours.status == "correct" for _, m, _, ours in found if m == "reference")
