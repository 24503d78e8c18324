"""Verifier errors, truncation policies, zero-variance filtering and No-Positive-Resampling."""

import pytest

from scalerl.envs.base import Score
from scalerl.rollout.types import Rollout
from scalerl.trainer.filters import (
    ErrorWatch,
    PromptRetirement,
    apply_truncation,
    drop_errors,
    error_kind,
    is_zero_variance,
    pass_rate,
)


def rollout(status="correct", finish="stop", task="arith", detail=""):
    return Rollout(sample_id="s", task=task, prompt_token_ids=(1,), token_ids=(2, 3),
                   logprobs=(-0.1, -0.2), versions=(0, 0), finish_reason=finish,
                   thinking_tokens=0, answer_tokens=2, completion="x",
                   score=Score(status=status, detail=detail))


def test_only_error_verdicts_are_left_out():
    group = [rollout(s) for s in ("correct", "wrong", "no_answer", "timeout", "error")]
    assert [r.score.status for r in drop_errors(group)] == ["correct", "wrong", "no_answer",
                                                            "timeout"]


def test_error_kind_blanks_names_and_numbers():
    a = "judge raised FileNotFoundError: [Errno 2] No such file: '/data/add2-12+7.txt'"
    b = "judge raised FileNotFoundError: [Errno 2] No such file: '/data/mul1-3*4.txt'"
    expected = "judge raised FileNotFoundError: [Errno _] No such file: _"
    assert error_kind(a) == error_kind(b) == expected


def step(n_error: int, n: int = 10, task: str = "code"):
    errors = [rollout("error", task=task, detail=f"sandbox error: worker {i} died")
              for i in range(n_error)]
    return [errors + [rollout("wrong", task="arith") for _ in range(n - n_error)]]


def test_error_watch_stops_after_patience_failing_steps_in_a_row():
    watch = ErrorWatch(max_frac=0.1, patience=3)
    # 0.5 > 0.1 fails; 0.1 is not above the threshold and resets the streak
    assert [watch.observe(step(k)) for k in (5, 5, 1, 5, 5)] == [None] * 5
    reason = watch.observe(step(8))
    assert reason is not None and "\n" not in reason
    assert "80% of the rollouts for 3 steps in a row" in reason
    assert "code 8/8" in reason and "arith" not in reason.split("by task:")[1].split(";")[0]
    assert "commonest error (8 of 8): sandbox error: worker 0 died" in reason


def test_error_watch_at_one_never_stops():
    watch = ErrorWatch(max_frac=1.0, patience=1)
    assert all(watch.observe(step(10)) is None for _ in range(5))


def test_zero_variance_is_all_rewards_alike():
    assert is_zero_variance([1.0, 1.0, 1.0])
    assert is_zero_variance([-1.0, -1.0])
    assert not is_zero_variance([1.0, -1.0, -1.0])


def test_truncation_drop_excludes_truncated_rollouts():
    group = [rollout(), rollout("correct", "truncated"), rollout("wrong")]
    kept = apply_truncation(group, "drop")
    assert [r.finish_reason for r in kept] == ["stop", "stop"]


def test_truncation_wrong_rescores_truncated_as_wrong():
    group = [rollout("correct", "truncated"), rollout()]
    out = apply_truncation(group, "wrong")
    assert [r.score.status for r in out] == ["wrong", "correct"]
    assert out[0].score.detail == "truncated (verifier: correct)"
    assert [r.score.status for r in apply_truncation(group, "keep")] == ["correct", "correct"]


def test_unknown_truncation_policy_is_named():
    with pytest.raises(KeyError, match="unknown truncation policy 'mask'; registered: drop, "
                                       "keep, wrong"):
        apply_truncation([], "mask")


def test_pass_rate_counts_correct_status():
    assert pass_rate([rollout(), rollout("wrong"), rollout("timeout"), rollout()]) == 0.5


def test_retirement_last_history_retires_at_threshold():
    npr = PromptRetirement(threshold=0.9, history="last")
    assert not npr.observe("arith/1", 0.875)
    assert npr.observe("arith/1", 0.9375)
    assert npr.is_retired("arith/1")
    assert not npr.is_retired("arith/2")


def test_retirement_mean_history_waits_for_the_average():
    npr = PromptRetirement(threshold=0.9, history="mean")
    assert not npr.observe("k", 0.5)
    assert not npr.observe("k", 1.0)  # mean 0.75
    assert not npr.observe("k", 1.0)  # mean 0.8333
    assert not npr.observe("k", 1.0)  # mean 0.875
    assert npr.observe("k", 1.0)  # mean 0.9


def test_retirement_state_round_trips():
    npr = PromptRetirement(history="mean")
    npr.observe("a", 1.0)
    npr.observe("b", 0.25)
    other = PromptRetirement(history="mean")
    other.load_state_dict(npr.state_dict())
    assert other.is_retired("a") and not other.is_retired("b")
    assert other.observe("b", 1.0) is False  # mean (0.25 + 1) / 2 = 0.625: history restored


def test_disabled_retirement_never_retires():
    npr = PromptRetirement(enabled=False)
    assert not npr.observe("a", 1.0)
    assert not npr.is_retired("a")
