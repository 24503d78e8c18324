"""HumanEval through the code verifier: all 164 canonical solutions pass, `return None` bodies
fail, the non-literal checks go through the two-process `check` mode and still catch bugs.

Each full pass runs 164 sandboxes through a thread pool (about 12-25 s on 2 shared cores with
bwrap; the figures are printed). In CI (`CI=true`) a missing bwrap fails instead of skipping.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.code.asserts import convert_check
from scalerl.sandbox import available_backends

IN_CI = os.environ.get("CI") == "true"
WORKERS = 4
# Read from the dataset by hand: these checks use loops, random inputs, helpers or assignments.
NOT_LITERAL = ["HumanEval/32", "HumanEval/33", "HumanEval/38", "HumanEval/44", "HumanEval/50",
               "HumanEval/53", "HumanEval/151"]


@pytest.fixture(scope="module")
def task():
    ok, why = available_backends()["bwrap"]
    if not ok:
        if IN_CI:
            pytest.fail(f"bwrap unavailable in CI: {why}")
        pytest.skip(f"bwrap unavailable: {why}")
    return get_task("humaneval")


def score_all(task, completions):
    samples = task.samples("test")
    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as ex:
        scores = list(ex.map(task.score, samples, completions))
    return scores, time.monotonic() - start


def with_body(solution: str, entry: str, body: str) -> str:
    """The canonical fenced solution with the entry point's body replaced by `body`."""
    head = re.search(rf"^def {entry}\(.*?\).*?:\n(\s+\"\"\".*?\"\"\"\n|\s+'''.*?'''\n)?",
                     solution, re.S | re.M)
    assert head, entry
    return solution[: head.end()] + f"    {body}\n```"


def test_humaneval_is_held_out_only(task):
    assert task.splits == ("test",)
    assert len(task.samples("test")) == 164
    with pytest.raises(ValueError, match="no split 'train'; valid: test"):
        task.samples("train")


def test_literal_checks_become_call_tests():
    samples = get_task("humaneval").samples("test")
    fallback = [s.id for s in samples if convert_check(s.tests["test"]) is None]
    assert fallback == NOT_LITERAL


def test_all_164_canonical_solutions_are_correct(task):
    samples = task.samples("test")
    scores, elapsed = score_all(task, [s.meta["solution"] for s in samples])
    bad = [(s.id, sc.status, sc.detail) for s, sc in zip(samples, scores, strict=True)
           if sc.status != "correct"]
    print(f"\nHumanEval canonical: {164 - len(bad)}/164 correct in {elapsed:.1f} s "
          f"({164 / elapsed:.1f} problems/s, {WORKERS} threads)")
    assert bad == []


def test_return_none_bodies_are_wrong(task):
    samples = task.samples("test")
    completions = [with_body(s.meta["solution"], s.tests["entry_point"], "return None")
                   for s in samples]
    scores, elapsed = score_all(task, completions)
    print(f"\nHumanEval return-None: {sum(s.status == 'wrong' for s in scores)}/164 wrong in "
          f"{elapsed:.1f} s")
    assert [s.status for s in scores] == ["wrong"] * 164


def test_check_mode_catches_a_bug_only_the_random_loop_sees(task):
    # add(x, y): literal asserts, then 100 random
    [sample] = [s for s in task.samples("test") if s.id == "HumanEval/53"]
    assert sample.id in NOT_LITERAL
    buggy = "```python\ndef add(x: int, y: int):\n    return x + y if x + y < 1500 else 0\n```"
    s = task.score(sample, buggy)
    # Line 17 of its test source is `assert candidate(x, y) == x + y` inside the random loop.
    assert s.status == "wrong" and "check() failed: line 17: AssertionError" in s.detail
    assert task.score(sample, "```python\ndef add(x, y):\n    return x + y\n```").correct
