"""arith_tool: true long products and exact quotients, deterministic leak-free splits, the python
environment attached, judged boxed-only by the math verifier."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import pytest

from scalerl.envs.catalog import get_task, task_names
from scalerl.envs.math.arith_tool import TOOL_LEVELS, ArithToolTask
from scalerl.envs.python_env import PythonEnvironment
from scalerl.envs.registry import UnknownTaskError

DIGITS = {"mul4": ((4, 4), (4, 4)), "mul5": ((5, 5), (4, 5)), "mul6": ((6, 6), (4, 6))}


@pytest.fixture(scope="module")
def task() -> ArithToolTask:
    return ArithToolTask(train_size=200, test_size=20)


def test_every_problem_is_true_arithmetic_of_its_level(task):
    for split in ("train", "test"):
        for s in task.samples(split):
            a, op, b = re.fullmatch(r"(\d+)([*/])(\d+)=", s.prompt).groups()
            a, b = int(a), int(b)
            level = s.meta["level"]
            if op == "*":
                assert a * b == int(s.answer)
                (la, ha), (lb, hb) = DIGITS[level]
                assert la <= len(str(a)) <= ha and lb <= len(str(b)) <= hb, s.prompt
            else:  # exact division by a 3-digit divisor: no remainder
                assert a % b == 0 and a // b == int(s.answer) and len(str(b)) == 3
                assert len(s.answer) == {"div3": 3, "div4": 4}[level]


def test_every_level_is_in_both_splits_and_train_never_holds_a_test_problem(task):
    test = {s.prompt for s in task.samples("test")}
    train = [s.prompt for s in task.samples("train")]
    assert not test & set(train) and len(set(train)) == len(train)
    assert {s.meta["level"] for s in task.samples("test")} == set(TOOL_LEVELS)
    assert len(task.samples("test")) == 20 * len(TOOL_LEVELS)


def test_splits_are_deterministic_and_the_seed_moves_train_only():
    a, b = ArithToolTask(train_size=30, test_size=5), ArithToolTask(train_size=30, test_size=5)
    c = ArithToolTask(train_size=30, test_size=5, seed=1)
    assert a.samples("train") == b.samples("train") and a.samples("test") == c.samples("test")
    assert a.samples("train") != c.samples("train")


def test_the_worked_solutions_code_prints_the_answer_and_the_trace_is_judged_correct(task):
    for s in task.samples("test")[::17]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(s.meta["code"], {})
        assert out.getvalue() == s.answer + "\n"
        assert task.score(s, s.meta["solution"]).status == "correct"


def test_only_a_boxed_answer_counts(task):
    s = task.samples("test")[0]
    shown = f"```python\n{s.meta['code']}\n```\n```output\n{s.answer}\n```\nDone."
    assert task.score(s, shown).status == "no_answer"
    assert task.score(s, f"\\boxed{{{int(s.answer) + 1}}}").status == "wrong"
    assert task.score(s, f"\\boxed{{{s.answer}}}").status == "correct"


def test_the_task_has_the_python_environment_and_says_how_to_use_it(task):
    assert isinstance(task.environment, PythonEnvironment) and task.environment.max_turns == 3
    assert "```python" in task.system_prompt and "\\boxed{}" in task.system_prompt
    assert task.preflight() is None


def test_registered_with_level_subsets():
    assert "arith_tool" in task_names()
    t = get_task("arith_tool:mul4,div3")
    assert t.levels == ("mul4", "div3") and isinstance(t.environment, PythonEnvironment)
    with pytest.raises(UnknownTaskError, match="unknown arith_tool level mul9; levels: mul4"):
        get_task("arith_tool:mul9")


def test_scalerl_tasks_list_shows_it():
    out = subprocess.run([sys.executable, "-m", "scalerl", "tasks", "list", "--json"],
                         capture_output=True, text=True, timeout=300).stdout
    (row,) = [line for line in out.splitlines() if '"name":"arith_tool"' in line.replace(" ", "")]
    assert "python tool" in row and '"test":250' in row.replace(" ", "")
