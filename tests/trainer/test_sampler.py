"""The multitask sampler: exact ratios, seeded order, resumable position, retirement."""

import pytest

from scalerl.envs.base import Sample
from scalerl.trainer.sampler import ExhaustedError, TaskSampler


def samples(task, n):
    return [Sample(id=str(i), task=task, prompt=f"{task}{i}") for i in range(n)]


DATA = {"a": samples("a", 10), "b": samples("b", 7)}


def test_weights_set_the_exact_mixture():
    sampler = TaskSampler(DATA, {"a": 3.0, "b": 1.0}, seed=0)
    drawn = [sampler().task for _ in range(40)]
    assert drawn.count("a") == 30 and drawn.count("b") == 10
    assert drawn[:4].count("a") == 3  # interleaved, not blocked


def test_each_epoch_is_a_permutation_and_seeds_differ():
    one = TaskSampler({"a": DATA["a"]}, {"a": 1.0}, seed=1)
    epoch = [one().id for _ in range(10)]
    assert sorted(epoch) == sorted(s.id for s in DATA["a"])
    other = TaskSampler({"a": DATA["a"]}, {"a": 1.0}, seed=2)
    assert [other().id for _ in range(10)] != epoch


def test_state_round_trip_continues_the_same_stream():
    ref = TaskSampler(DATA, {"a": 2.0, "b": 1.0}, seed=5)
    [ref() for _ in range(13)]
    state = ref.state_dict()
    expected = [(s.task, s.id) for s in ref.draw(20)]
    resumed = TaskSampler(DATA, {"a": 2.0, "b": 1.0}, seed=0)
    resumed.load_state_dict(state)
    assert [(s.task, s.id) for s in resumed.draw(20)] == expected


def test_retired_prompts_are_skipped_and_exhaustion_is_loud():
    retired = {f"b/{i}" for i in range(7)} | {"a/3"}
    sampler = TaskSampler(DATA, {"a": 1.0, "b": 1.0}, seed=0, is_retired=retired.__contains__)
    drawn = sampler.draw(18)
    assert {s.task for s in drawn} == {"a"} and "3" not in {s.id for s in drawn}
    everything = TaskSampler({"b": DATA["b"]}, {"b": 1.0}, is_retired=lambda k: True)
    with pytest.raises(ExhaustedError, match="retired"):
        everything()
