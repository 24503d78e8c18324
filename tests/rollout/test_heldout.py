"""pass@k / mean@n estimators and per-task aggregation (rollout/heldout.py), checked by hand."""

import json

import pytest

from scalerl.envs.base import Score
from scalerl.rollout.heldout import RowError, aggregate, pass_at_k, record_from_row
from scalerl.rollout.types import Rollout


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 2, 0.7),                 # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 1, 0.4),                 # pass@1 = c/n
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (4, 1, 2, 0.5),                 # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 4, 2, 1.0),                 # n - c < k: every k-subset has a correct one
    (5, 0, 3, 0.0),
    (5, 5, 5, 1.0),
    (1000, 1, 500, 0.5),            # 1 - C(999,500)/C(1000,500) = 1 - 500/1000; no overflow
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_pass_at_k_is_not_max_over_n():
    # 1 correct of 16: max-over-n says pass@4 = 1; the unbiased value is 4/16
    assert pass_at_k(16, 1, 4) == pytest.approx(0.25)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def rollout(task, sample_id, group, status, finish="stop", think=3, answer=2):
    tokens = tuple(range(think + answer))
    return Rollout(sample_id=sample_id, task=task, prompt_token_ids=(1, 2), token_ids=tokens,
                   logprobs=tuple(-0.5 for _ in tokens), versions=tuple(0 for _ in tokens),
                   finish_reason=finish, thinking_tokens=think, answer_tokens=answer,
                   completion="x", score=Score(status=status), group=group,
                   interrupted=finish == "interrupted")


def fixture_rollouts():
    """task a: s1 2/4 correct, s2 0/4; task b: s1 (same id, other task) 4/4."""
    a1 = ["correct", "wrong", "correct", "no_answer"]
    a2 = ["wrong", "error", "timeout", "wrong"]
    out = [rollout("a", "s1", g, st, finish="truncated" if g == 3 else "stop")
           for g, st in enumerate(a1)]
    out += [rollout("a", "s2", g, st, finish="interrupted" if g == 0 else "stop", think=7)
            for g, st in enumerate(a2)]
    out += [rollout("b", "s1", g, "correct", think=1, answer=1) for g in range(4)]
    return out


def test_aggregate_per_task_and_overall_by_hand():
    report = aggregate(fixture_rollouts(), ks=(1, 2, 8))
    a, b, overall = report.tasks["a"], report.tasks["b"], report.overall
    assert (a.samples, a.rollouts, b.samples, overall.samples) == (2, 8, 1, 3)
    assert a.pass_at[1] == pytest.approx(0.25)              # (2/4 + 0/4) / 2
    assert a.pass_at[2] == pytest.approx((5 / 6 + 0) / 2)   # s1: 1 - C(2,2)/C(4,2) = 5/6
    assert b.pass_at[1] == 1.0 and b.pass_at[2] == 1.0
    assert overall.pass_at[1] == pytest.approx((0.5 + 0 + 1) / 3)
    assert overall.pass_at[2] == pytest.approx((5 / 6 + 0 + 1) / 3)
    assert a.pass_at[8] is None and "fewest here is 4" in a.notes[0]
    assert a.mean_at_n == pytest.approx(0.25) and a.mean_key == "mean@4"
    assert a.stderr == pytest.approx(0.25)  # std([0.5, 0], ddof=1) / sqrt(2) = 0.3536 / 1.414
    assert b.stderr is None  # one sample
    assert a.truncated_frac == pytest.approx(1 / 8) and a.interrupted_frac == pytest.approx(1 / 8)
    assert a.status_frac["error"] == pytest.approx(1 / 8)
    assert a.status_frac["timeout"] == pytest.approx(1 / 8)
    assert a.mean_length == pytest.approx((4 * 5 + 4 * 9) / 8)
    assert a.mean_thinking_tokens == pytest.approx((4 * 3 + 4 * 7) / 8)
    assert overall.mean_length == pytest.approx((4 * 5 + 4 * 9 + 4 * 2) / 12)


def test_report_dict_and_val_metrics_names():
    report = aggregate(fixture_rollouts(), ks=(1, 8))
    d = report.to_dict()
    assert set(d) == {"tasks", "overall"}
    assert d["tasks"]["a"]["pass@1"] == pytest.approx(0.25)
    assert d["tasks"]["a"]["pass@8"] is None and d["tasks"]["a"]["mean@4"] == pytest.approx(0.25)
    m = report.metrics("val")
    assert m["val/a/pass@1"] == pytest.approx(0.25)
    assert m["val/pass@1"] == pytest.approx(0.5)
    assert m["val/a/truncated_frac"] == pytest.approx(1 / 8)
    assert "val/a/pass@8" not in m  # undefined values are left out, never logged as 0


def test_rows_give_the_same_report_as_rollouts():
    rollouts = fixture_rollouts()
    rows = [json.loads(json.dumps(r.to_row())) for r in rollouts]  # through JSON, as on disk
    assert aggregate(rows, ks=(1, 2)).to_dict() == aggregate(rollouts, ks=(1, 2)).to_dict()


def test_unequal_rollout_counts_use_the_fewest_for_pass_at_k():
    rows = [{"task": "t", "sample_id": "a", "status": "correct"}] * 3
    rows += [{"task": "t", "sample_id": "b", "status": "wrong"}] * 2
    r = aggregate(rows, ks=(1, 2, 3)).tasks["t"]
    assert (r.n_min, r.n_max, r.mean_key) == (2, 3, "mean@n")
    assert r.pass_at[2] == pytest.approx(0.5) and r.pass_at[3] is None
    assert r.truncated_frac is None and r.mean_length is None  # fields absent from the rows


@pytest.mark.parametrize("row, message", [
    ({"sample_id": "a", "status": "correct"}, "missing field 'task'"),
    ({"task": "t", "sample_id": "a", "status": "right"}, "field 'status' is 'right'; valid:"),
    ({"task": "t", "sample_id": "a", "status": "wrong", "finish_reason": "eos"},
     "field 'finish_reason' is 'eos'"),
    ({"task": "t", "sample_id": None, "status": "wrong"}, "field 'sample_id'"),
    ({"task": "t", "sample_id": "a", "status": "wrong", "thinking_tokens": -1},
     "'thinking_tokens' must be a non-negative integer"),
    ([1, 2], "expected a JSON object"),
])
def test_malformed_rows_name_the_problem(row, message):
    with pytest.raises(RowError, match=message):
        record_from_row(row)


def multi_turn(sample_id: str, group: int, assistant_turns: int, call_statuses: tuple[str, ...]):
    """A rollout of `assistant_turns` assistant turns with a tool turn between each two, and
    one tool call of each status in `call_statuses`."""
    from dataclasses import replace

    from scalerl.envs.environment import Turn

    base = rollout("tools", sample_id, group, "correct")
    turns, at = [], 0
    for i in range(assistant_turns):
        if i:
            turns.append(Turn("tool", "out", at, at + 1, False))
            at += 1
        turns.append(Turn("assistant", "x", at, at + 1, True))
        at += 1
    calls = tuple({"turn": 0, "name": "python", "code": "1", "status": s, "output": "",
                   "latency_s": 0.1, "truncated": False} for s in call_statuses)
    return replace(base, turns=tuple(turns), tool_calls=calls)


def test_multi_turn_figures_by_hand_from_rollouts_and_rows():
    rollouts = [multi_turn("a", 0, 2, ("ok",)), multi_turn("a", 1, 3, ("ok", "error")),
                rollout("tools", "a", 2, "wrong")]  # a single-turn rollout among them
    for items in (rollouts, [json.loads(json.dumps(r.to_row())) for r in rollouts]):
        d = aggregate(items).to_dict()["tasks"]["tools"]
        assert d["turns_mean"] == pytest.approx((2 + 3 + 1) / 3)
        assert d["tool_calls_mean"] == pytest.approx(3 / 3)
        assert d["tool_error_frac"] == pytest.approx(1 / 3)
    metrics = aggregate(rollouts).metrics()
    assert metrics["val/tools/turns_mean"] == pytest.approx(2.0)
    single = aggregate([rollout("plain", "a", 0, "correct")]).to_dict()["tasks"]["plain"]
    assert "turns_mean" not in single  # tools off: no multi-turn figure at all


def test_the_results_table_shows_turn_columns_only_for_multi_turn_reports():
    from scalerl.evaluation.render import task_table

    plain = task_table(aggregate([rollout("plain", "a", 0, "correct")]).to_dict(), (1,))
    tools = task_table(aggregate([multi_turn("a", 0, 2, ("timeout",))]).to_dict(), (1,))
    assert "tool calls" not in plain[0]
    assert tools[0].split(" | ")[-3:] == ["turns", "tool calls", "tool errors |"]
    assert tools[2].split(" | ")[-3:] == ["2.000", "1.000", "1.000 |"]


@pytest.mark.parametrize("turns, calls", [("x", None), ([1], None), ([], "y")])
def test_malformed_turns_are_named(turns, calls):
    row = {"task": "t", "sample_id": "a", "status": "correct", "turns": turns,
           "tool_calls": calls}
    with pytest.raises(RowError, match="turns|tool_calls"):
        record_from_row(row)


def test_a_multi_turn_row_carries_its_turns_calls_and_ending_and_a_single_turn_row_does_not():
    from dataclasses import replace

    mt = multi_turn("a", 0, 2, ("ok",))
    row = replace(mt, meta={"ended": "max_turns"}).to_row()
    assert [t["role"] for t in row["turns"]] == ["assistant", "tool", "assistant"]
    assert row["tool_calls"][0]["status"] == "ok" and row["ended"] == "max_turns"
    plain = rollout("plain", "a", 0, "correct").to_row()
    assert not {"turns", "tool_calls", "ended"} & set(plain)
