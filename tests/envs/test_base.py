"""The contracts: Sample round-trips through JSON, Score rejects unknown statuses."""

import json

import pytest

from scalerl.envs.base import Sample, Score, truncate


def test_sample_round_trips_through_json_with_chat_prompt():
    s = Sample(id="a1", task="t", prompt=({"role": "user", "content": "1+1="},), answer="2",
               meta={"level": 1})
    back = Sample.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


def test_sample_messages_prepend_system_prompt_once():
    s = Sample(id="a", task="t", prompt="2+2=")
    msgs = s.messages("Answer in \\boxed{}.")
    assert msgs == [{"role": "system", "content": "Answer in \\boxed{}."},
                    {"role": "user", "content": "2+2="}]


def test_score_rejects_unknown_status():
    with pytest.raises(ValueError, match="not one of"):
        Score(status="passed")


def test_a_verdict_is_a_status_a_detail_and_an_optional_credit_never_a_reward():
    import dataclasses

    assert [f.name for f in dataclasses.fields(Score)] == ["status", "detail", "latency_s",
                                                           "reward"]
    assert Score("wrong").reward is None  # all-or-nothing unless graded
    assert Score("wrong", reward=0.25).reward == 0.25


@pytest.mark.parametrize("credit", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_a_graded_credit_outside_0_1_or_not_a_number_is_refused(credit):
    with pytest.raises(ValueError, match=r"Score.reward must be a number in \[0, 1\] or None"):
        Score("wrong", reward=credit)


def test_truncate_says_how_much_was_dropped():
    assert truncate("x" * 310, 300).endswith("[+10 chars]")
