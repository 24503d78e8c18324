"""rg:<dataset>: reasoning-gym math generators, leak-free splits, both scorers, unknown names."""

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.data import prompt_key
from scalerl.envs.math.reasoning_gym import ReasoningGymTask, math_datasets, scorer_of
from scalerl.envs.registry import UnknownTaskError


@pytest.fixture(scope="module")
def arith_task():
    return ReasoningGymTask("basic_arithmetic", train_size=60, test_size=20)


def test_only_math_generators_are_offered():
    names = math_datasets()
    assert {"basic_arithmetic", "gcd", "polynomial_multiplication", "coin_flip"} <= set(names)
    assert "maze" not in names and "sudoku" not in names


def test_unknown_dataset_is_one_line_listing_valid_ones():
    with pytest.raises(UnknownTaskError) as info:
        get_task("rg:maze")
    msg = str(info.value)
    assert "\n" not in msg and "unknown reasoning-gym math dataset 'maze'" in msg
    assert "basic_arithmetic" in msg and "time_intervals" in msg


def test_test_split_is_fixed_and_disjoint_from_train(arith_task):
    other = ReasoningGymTask("basic_arithmetic", seed=5, train_size=60, test_size=20)
    assert arith_task.samples("test") == other.samples("test")
    assert arith_task.samples("train") != other.samples("train")
    test_keys = {prompt_key(s.prompt) for s in arith_task.samples("test")}
    assert test_keys.isdisjoint(prompt_key(s.prompt) for s in arith_task.samples("train"))


def test_train_seed_equal_to_test_seed_leaves_no_overlap():
    from scalerl.envs.math.reasoning_gym import TEST_SEED

    t = ReasoningGymTask("gcd", seed=TEST_SEED, train_size=20, test_size=20)
    assert len(t.samples("train")) == 0 and len(t.samples("test")) == 20


def test_numeric_dataset_is_scored_by_math_verify(arith_task):
    s = arith_task.samples("test")[0]
    assert scorer_of("basic_arithmetic") == "math-verify"
    assert arith_task.score(s, f"The result is \\boxed{{{s.answer}}}").status == "correct"
    assert arith_task.score(s, f"\\boxed{{{int(s.answer) + 1}}}").status == "wrong"


def test_non_numeric_dataset_is_scored_by_reasoning_gym():
    t = ReasoningGymTask("time_intervals", train_size=5, test_size=5)
    s = t.samples("test")[0]
    assert scorer_of("time_intervals") == "reasoning-gym" and ":" in s.answer
    good = t.score(s, f"<think>count</think>\\boxed{{{s.answer}}}")
    assert good.status == "correct" and "reasoning-gym score 1.000" in good.detail
    assert t.score(s, "\\boxed{99:99:99}").status == "wrong"
    assert t.score(s, f"the answer is {s.answer}").status == "no_answer"
