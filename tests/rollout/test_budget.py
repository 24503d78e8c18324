"""Budget planning and token accounting, without an engine (token ids are made up)."""

import pytest

from scalerl.rollout import budget as B
from scalerl.rollout.types import Budget

CLOSE = (9,)  # "</think>" as one token
PHRASE = (7, 7, 9)  # a 3-token interruption phrase ending in "</think>"


def plan(thinking, answer, total=None):
    return B.plan_rollout(Budget(thinking=thinking, answer=answer, total=total), len(PHRASE), 0)


def test_fixed_plan_cap_leaves_room_for_the_phrase():
    p = plan(10, 4)
    assert (p.thinking, p.answer, p.cap) == (10, 4, 10 + 3 + 4)
    assert B.first_phase_tokens(p) == 10


def test_explicit_total_caps_everything():
    p = plan(10, 4, total=12)
    assert p.cap == 12
    # 10 thinking tokens + 3 forced = 13 > 12: no room for an answer, so no phase 2
    step = B.after_first_phase(p, [1] * 10, False, CLOSE, PHRASE)
    assert step == B.Done(10, "truncated")


def test_range_is_sampled_per_seed_within_bounds_and_deterministic():
    budget = Budget(thinking=(10, 20), answer=4)
    draws = [B.plan_rollout(budget, 3, seed).thinking for seed in range(200)]
    assert min(draws) >= 10 and max(draws) <= 20
    assert len(set(draws)) == 11  # every value of the inclusive range shows up in 200 draws
    assert draws == [B.plan_rollout(budget, 3, seed).thinking for seed in range(200)]


def test_rollout_seed_is_stable_and_distinct():
    a = B.rollout_seed(0, "s1", 0)
    assert a == B.rollout_seed(0, "s1", 0)
    assert len({a, B.rollout_seed(0, "s1", 1), B.rollout_seed(1, "s1", 0),
                B.rollout_seed(0, "s2", 0)}) == 4


def test_natural_stop_within_thinking_budget_needs_one_phase():
    p = plan(10, 4)
    tokens = [1, 2, 9, 5, 6]  # think, close, answer 2 tokens (EOS included), ended
    assert B.after_first_phase(p, tokens, True, CLOSE, PHRASE) == B.Done(5, "stop")
    assert B.count_phases(tokens, CLOSE, True) == (3, 2)


def test_budget_reached_without_close_injects_phrase_then_answer_budget():
    p = plan(10, 4)
    step = B.after_first_phase(p, [1] * 10, False, CLOSE, PHRASE)
    assert step == B.Continue(keep=10, forced=PHRASE, max_tokens=4,
                              reason_if_stopped="interrupted")
    assert B.final_reason(step, ended=True) == "interrupted"
    assert B.final_reason(step, ended=False) == "truncated"
    full = [1] * 10 + list(PHRASE) + [5, 6]
    assert B.count_phases(full, CLOSE, True) == (13, 2)


def test_close_near_budget_end_continues_answer_with_what_is_left():
    p = plan(10, 4)
    tokens = [1] * 8 + [9, 5]  # closed at index 8, one answer token already, cut by the limit
    step = B.after_first_phase(p, tokens, False, CLOSE, PHRASE)
    assert step == B.Continue(keep=10, forced=(), max_tokens=3, reason_if_stopped="stop")


def test_answer_longer_than_its_budget_is_cut_and_truncated():
    p = plan(10, 2)
    tokens = [1, 9, 5, 5, 5, 5]  # answer of 4 > 2, ended on EOS
    assert B.after_first_phase(p, tokens, True, CLOSE, PHRASE) == B.Done(4, "truncated")


def test_eos_without_close_is_a_stop_with_all_tokens_thinking():
    p = plan(10, 4)
    assert B.after_first_phase(p, [1, 2, 3], True, CLOSE, PHRASE) == B.Done(3, "stop")
    assert B.count_phases([1, 2, 3], CLOSE, True) == (3, 0)


def test_no_thinking_format_uses_answer_budget_alone():
    p = plan(None, 5)
    assert p.cap == 5 and B.first_phase_tokens(p) == 5
    assert B.after_first_phase(p, [1, 2], True, CLOSE, PHRASE) == B.Done(2, "stop")
    assert B.after_first_phase(p, [1] * 5, False, CLOSE, PHRASE) == B.Done(5, "truncated")
    assert B.count_phases([1, 9, 2], CLOSE, False) == (0, 3)


@pytest.mark.parametrize("tokens,pattern,expected", [
    ([1, 2, 3, 4], [2, 3], 3), ([1, 2, 3], [3, 4], -1), ([2, 2, 3], [2, 3], 3), ([1], [], -1),
])
def test_find_subsequence(tokens, pattern, expected):
    assert B.find_subsequence(tokens, pattern) == expected


def test_sampled_tokens_never_exceed_thinking_plus_answer():
    """Every planned path: sampled (non-forced) tokens <= thinking + answer."""
    p = plan(6, 3)
    for n in range(0, 7):
        for close_at in [None, *range(n)]:
            tokens = [1] * n
            if close_at is not None:
                tokens[close_at] = 9
            for ended in (True, False):
                if not ended and n < 6:
                    continue  # without EOS, phase 1 only stops at its limit
                step = B.after_first_phase(p, tokens, ended, CLOSE, PHRASE)
                sampled = step.keep + (step.max_tokens if isinstance(step, B.Continue) else 0)
                assert sampled <= 6 + 3, (tokens, ended, step)


def test_parse_thinking_reads_fixed_range_and_none():
    assert B.parse_thinking("12") == 12
    assert B.parse_thinking("10:12") == (10, 12)
    assert B.parse_thinking(None) is None and B.parse_thinking("none") is None
    with pytest.raises(ValueError, match="expected A or A:B"):
        B.parse_thinking("ten")
    with pytest.raises(ValueError, match="low <= high"):
        Budget(thinking=B.parse_thinking("12:10"), answer=4)


def test_hard_cap_counts_the_phrase_once_defined():
    assert Budget(thinking=(5, 10), answer=4).hard_cap(3) == 17  # largest thinking + phrase
    assert Budget(thinking=(5, 10), answer=4).hard_cap(3, thinking=6) == 13  # one rollout's
    assert Budget(thinking=None, answer=4).hard_cap(3) == 4  # no thinking format: no phrase
    assert Budget(thinking=10, answer=4, total=8).hard_cap(3) == 8
    plan = B.plan_rollout(Budget(thinking=(5, 10), answer=4), 3, seed=1)
    assert plan.cap == Budget(thinking=(5, 10), answer=4).hard_cap(3, thinking=plan.thinking)
