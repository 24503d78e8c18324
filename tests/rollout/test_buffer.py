"""GroupBuffer: the lag definition and its off-by-one, admission pacing, order, timeouts, resume."""

from __future__ import annotations

import json
import threading
import time

import pytest

from scalerl.envs.base import Sample, Score
from scalerl.rollout.buffer import (
    BufferClosed,
    BufferTimeout,
    GroupBuffer,
    PromptGroup,
    lag_metrics,
    rollout_from_dict,
    rollout_lag,
    rollout_to_dict,
)
from scalerl.rollout.types import Rollout


def make_sample(i: int) -> Sample:
    return Sample(id=f"s{i}", task="arith", prompt=f"Q:{i}+1=", answer=str(i + 1))


def make_rollout(sample: Sample, versions: tuple[int, ...], group: int = 0) -> Rollout:
    return Rollout(
        sample_id=sample.id, task=sample.task, prompt_token_ids=(1, 2),
        token_ids=tuple(range(len(versions))), logprobs=(None,) + (-0.5,) * (len(versions) - 1),
        versions=versions, finish_reason="stop", thinking_tokens=0, answer_tokens=len(versions),
        completion="x" * len(versions), score=Score(status="correct", latency_s=0.1),
        group=group, timings={"gen_s": 0.2}, meta={"k": [1, 2]},
    )


def make_group(seq: int, sample: Sample, versions: tuple[int, ...], n: int = 2) -> PromptGroup:
    return PromptGroup(seq, sample, tuple(make_rollout(sample, versions, i) for i in range(n)))


def admit_all(buf: GroupBuffer, generator_version: int, start: int = 0) -> list[int]:
    """Admit prompts until the lag bound stops admission; returns their sequence numbers."""
    seqs = []
    while buf.admissible(generator_version):
        seqs.append(buf.admit(make_sample(start + len(seqs))))
    buf.claim_queued()
    return seqs


def test_lag_is_trainer_version_minus_oldest_token_version():
    r = make_rollout(make_sample(0), (3, 4, 5))
    assert rollout_lag(5, r) == 2
    assert rollout_lag(3, r) == 0  # sampled entirely by the weights being trained: on-policy


def test_lag_metrics_worked_by_hand():
    assert lag_metrics([0, 2, 2, 4]) == {
        "async/lag_min": 0.0, "async/lag_mean": 2.0, "async/lag_max": 4.0}
    assert lag_metrics([]) == {}


def test_group_exactly_max_lag_old_is_returned():
    buf = GroupBuffer(groups_per_batch=1, max_lag=2, trainer_version=5)
    s = make_sample(0)
    buf.admit(s)
    buf.claim_queued()
    buf.put(make_group(0, s, (3, 4, 5)))
    batch = buf.take_batch(trainer_version=5, timeout_s=1.0)
    assert batch.lags == (2, 2)
    assert batch.regenerated == 0


def test_group_one_version_too_old_is_never_returned_but_sent_back():
    buf = GroupBuffer(groups_per_batch=1, max_lag=1, trainer_version=5)
    s = make_sample(0)
    buf.admit(s)
    buf.claim_queued()
    buf.put(make_group(0, s, (3, 4, 5)))
    with pytest.raises(BufferTimeout, match="waiting on \\{0: 'queued'\\}"):
        buf.take_batch(trainer_version=5, timeout_s=0.2)
    assert buf.regenerated_total == 1
    assert buf.claim_queued() == [(0, s)]  # the prompt comes back to be generated again
    buf.put(make_group(0, s, (5, 5)))
    assert buf.take_batch(trainer_version=5, timeout_s=1.0).lags == (0, 0)


@pytest.mark.parametrize("max_lag", [0, 1, 8])
def test_admission_allows_exactly_max_lag_plus_one_batches_ahead(max_lag):
    buf = GroupBuffer(groups_per_batch=3, max_lag=max_lag)
    assert len(admit_all(buf, generator_version=0)) == 3 * (max_lag + 1)


def test_max_lag_zero_is_synchronous():
    """Batch b+1's prompts may start only once weights of version b+1 are loaded."""
    buf = GroupBuffer(groups_per_batch=2, max_lag=0)
    assert admit_all(buf, 0) == [0, 1]
    for seq in (0, 1):
        buf.put(make_group(seq, make_sample(seq), (0, 0)))
    batch = buf.take_batch(trainer_version=0, timeout_s=1.0)
    assert batch.lags == (0, 0, 0, 0)
    assert not buf.admissible(0)  # the trainer is stepping on batch 0: old weights must wait
    assert admit_all(buf, 1, start=2) == [2, 3]


def test_admission_follows_the_trainer_version_actually_reached():
    buf = GroupBuffer(groups_per_batch=1, max_lag=1)
    assert admit_all(buf, 0) == [0, 1]
    buf.put(make_group(0, make_sample(0), (0,)))
    buf.take_batch(trainer_version=0, timeout_s=1.0)
    # batch 1 predicted at version 1, batch 2 at 2: with generator at 1, prompt 2 may start
    assert admit_all(buf, 1, start=2) == [2]


def test_batch_is_taken_in_admission_order_once_complete():
    buf = GroupBuffer(groups_per_batch=3, max_lag=0)
    admit_all(buf, 0)
    got: list = []
    t = threading.Thread(target=lambda: got.append(buf.take_batch(0, timeout_s=5.0)))
    t.start()
    for seq in (2, 0):
        buf.put(make_group(seq, make_sample(seq), (0,)))
    time.sleep(0.1)
    assert not got  # prompt 1 is still running
    buf.put(make_group(1, make_sample(1), (0,)))
    t.join(5.0)
    assert [g.seq for g in got[0].groups] == [0, 1, 2]
    assert got[0].wait_s >= 0.1


def test_take_batch_timeout_names_what_is_missing():
    buf = GroupBuffer(groups_per_batch=2, max_lag=0)
    admit_all(buf, 0)
    buf.put(make_group(0, make_sample(0), (0,)))
    with pytest.raises(BufferTimeout, match="batch 0 .*waiting on \\{1: 'running'\\}"):
        buf.take_batch(0, timeout_s=0.1)


def test_close_wakes_a_waiting_trainer_with_the_cause():
    buf = GroupBuffer(groups_per_batch=1, max_lag=0)
    errors: list = []

    def take():
        try:
            buf.take_batch(0, timeout_s=10.0)
        except BufferClosed as e:
            errors.append(e)

    t = threading.Thread(target=take)
    t.start()
    time.sleep(0.05)
    buf.close(RuntimeError("engine died"))
    t.join(2.0)
    assert not t.is_alive()
    assert isinstance(errors[0].__cause__, RuntimeError)


def test_put_for_a_prompt_not_running_raises():
    buf = GroupBuffer(groups_per_batch=1, max_lag=0)
    with pytest.raises(KeyError, match="seq 7 is absent"):
        buf.put(make_group(7, make_sample(7), (0,)))


def test_rollout_round_trips_through_json():
    r = make_rollout(make_sample(3), (1, 2, 2))
    assert rollout_from_dict(json.loads(json.dumps(rollout_to_dict(r)))) == r


def test_a_multi_turn_rollout_round_trips_through_json_with_its_turns_and_calls():
    """A PipelineRL checkpoint keeps multi-turn rollouts whole (turns as Turn objects)."""
    from dataclasses import replace

    from scalerl.envs.environment import Turn

    r = replace(make_rollout(make_sample(3), (1, 2, 2)),
                turns=(Turn("assistant", "a", 0, 2, True), Turn("tool", "7", 2, 3, False)),
                tool_calls=({"turn": 0, "name": "python", "code": "print(7)", "status": "ok",
                             "output": "7\n", "latency_s": 0.01, "truncated": False},))
    back = rollout_from_dict(json.loads(json.dumps(rollout_to_dict(r))))
    assert back == r and isinstance(back.turns[1], Turn)


def test_state_round_trip_neither_repeats_nor_skips_a_prompt():
    buf = GroupBuffer(groups_per_batch=2, max_lag=1)
    assert admit_all(buf, 0) == [0, 1, 2, 3]
    for seq in (0, 1, 3):
        buf.put(make_group(seq, make_sample(seq), (0,)))
    first = buf.take_batch(0, timeout_s=1.0)  # prompts 0, 1 trained before the "crash"
    state = json.loads(json.dumps(buf.state_dict()))

    resumed = GroupBuffer(groups_per_batch=2, max_lag=1)
    resumed.load_state_dict(state)
    assert [s for s, _ in resumed.claim_queued()] == [2]  # in flight at the crash: regenerate
    resumed.put(make_group(2, make_sample(2), (1,)))
    second = resumed.take_batch(1, timeout_s=1.0)
    assert [g.seq for g in second.groups] == [2, 3]
    assert second.groups[1] == make_group(3, make_sample(3), (0,))  # buffered group kept as is
    assert admit_all(resumed, 1, start=4) == [4, 5]
    trained = [g.sample.id for b in (first, second) for g in b.groups]
    assert trained == ["s0", "s1", "s2", "s3"]


def test_resume_with_a_different_batch_size_is_refused():
    state = GroupBuffer(groups_per_batch=2, max_lag=1).state_dict()
    with pytest.raises(ValueError, match="groups_per_batch 2, this run 3"):
        GroupBuffer(groups_per_batch=3, max_lag=1).load_state_dict(state)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_lag must be >= 0"):
        GroupBuffer(groups_per_batch=2, max_lag=-1)
    with pytest.raises(ValueError, match="groups_per_batch must be > 0"):
        GroupBuffer(groups_per_batch=0, max_lag=1)
