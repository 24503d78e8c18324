"""arith: hand-checked scratchpads, true arithmetic, a fixed held-out set disjoint from train."""

import json
import operator
import random
import re
import subprocess
import sys

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.data import prompt_key
from scalerl.envs.math.arith import (
    DEFAULT_MIX,
    LEVELS,
    ArithTask,
    add_steps,
    is_heldout,
    mul_steps,
    sub_steps,
)
from scalerl.envs.registry import UnknownTaskError

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def test_addition_scratchpad_is_the_design_doc_example():
    assert add_steps(23, 58) == ("3+8=11 c1 2+5+1=8", "81")


def test_hand_worked_scratchpads():
    assert add_steps(78, 56) == ("8+6=14 c1 7+5+1=13", "134")
    assert add_steps(123, 45) == ("3+5=8 2+4=6 1+0=1", "168")
    assert sub_steps(52, 17) == ("12-7=5 b1 5-1-1=3", "35")
    assert sub_steps(105, 98) == ("15-8=7 b1 10-9-1=0 b1 1-0-1=0", "7")
    assert sub_steps(40, 40) == ("0-0=0 4-4=0", "0")
    assert mul_steps(47, 6) == ("7*6=42 c4 4*6+4=28", "282")
    assert mul_steps(105, 3) == ("5*3=15 c1 0*3+1=1 1*3=3", "315")


def _check_step(step: str) -> None:
    """Each scratchpad step is a true equation, e.g. `12-7-1=4` or `4*6+4=28`."""
    lhs, rhs = step.split(" ")[0].split("=")
    assert eval(lhs) == int(rhs), step  # only digits and + - * reach eval


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_every_level_gives_the_true_result_with_true_steps(level):
    lv, rng = LEVELS[level], random.Random(level)
    for _ in range(300):
        a, b = lv.problem(rng)
        steps, answer = lv.steps(a, b)
        assert int(answer) == OPS[lv.op](a, b)
        for step in re.split(r" (?=\d)", steps):
            _check_step(step)


@pytest.fixture(scope="module")
def task():
    return ArithTask(train_size=200, test_size=30)


def test_prompts_are_short_and_solutions_use_the_warm_start_format(task):
    for s in task.samples("train") + task.samples("test"):
        assert re.fullmatch(r"\d+[+\-*]\d+=", s.prompt)
        assert re.fullmatch(r"<think>[^<]+</think>\\boxed\{\d+\}", s.meta["solution"])
        assert s.meta["solution"].endswith(f"\\boxed{{{s.answer}}}")


def test_test_set_is_fixed_and_disjoint_from_train_for_every_seed(task):
    other = ArithTask(seed=7, train_size=200, test_size=30)
    assert task.samples("test") == other.samples("test")
    assert task.samples("train") != other.samples("train")
    assert len(task.samples("test")) == 30 * len(DEFAULT_MIX)
    for t in (task, other):
        train = {prompt_key(s.prompt) for s in t.samples("train")}
        assert train.isdisjoint(prompt_key(s.prompt) for s in t.samples("test"))
        assert all(is_heldout(s.prompt) for s in t.samples("test"))
        assert not any(is_heldout(s.prompt) for s in t.samples("train"))


def test_train_is_the_same_in_another_process():
    code = ("from scalerl.envs.math.arith import ArithTask\n"
            "print([s.id for s in ArithTask(seed=3, train_size=50).samples('train')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    here = [s.id for s in ArithTask(seed=3, train_size=50).samples("train")]
    assert json.loads(out.replace("'", '"')) == here


def test_small_levels_are_capped_by_their_problem_space():
    # mul1: 90 two-digit numbers x 8 one-digit multipliers = 720 problems, ~10% held out.
    t = ArithTask("m", ("mul1",), train_size=5000, test_size=10)
    assert 600 <= len(t.samples("train")) <= 700
    assert len({s.prompt for s in t.samples("train")}) == len(t.samples("train"))


def test_worked_solution_scores_correct_and_mistakes_do_not(task):
    s = task.samples("test")[0]
    assert task.requires_thinking
    assert task.score(s, s.meta["solution"]).status == "correct"
    assert task.score(s, f"<think>x</think>\\boxed{{{int(s.answer) + 1}}}").status == "wrong"
    assert task.score(s, f"\\boxed{{{s.answer}}}").status == "no_answer"  # no </think>


def test_level_variants_and_unknown_level():
    t = get_task("arith:add2,sub2")
    assert {s.meta["level"] for s in t.samples("test")} == {"add2", "sub2"}
    with pytest.raises(UnknownTaskError, match="unknown arith level add9; levels: add2, add3"):
        get_task("arith:add9")
