"""The skip rule every data-backed task shares (envs/rows.py): unusable rows are skipped and
counted by reason up to the set share (more than it stops the load in one line), the summary
is logged once, and two golds of one problem text keep distinct ids."""

from __future__ import annotations

import logging

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.data import DataError
from scalerl.envs.rows import Skipped, convert_rows, distinct_ids, report_skipped


def answer_of(row):
    if not row.get("answer"):
        raise ValueError("answer is empty")
    return row["answer"]


def rows(n_good: int, n_empty: int, n_missing: int = 0) -> list[dict]:
    good = [{"problem": f"p{i}", "answer": str(i)} for i in range(n_good)]
    return good + [{"problem": "e", "answer": ""}] * n_empty + [{"problem": "m"}] * n_missing


def strict(row):  # a KeyError is a missing column
    return row["answer"] or answer_of(row)


def test_bad_rows_up_to_the_share_are_skipped_and_counted_by_reason():
    # 198 good + 2 bad = 200 rows: 2 <= 1% of 200, so the load goes on
    out, skipped = convert_rows(rows(198, 1, 1), strict, where="t: f.jsonl")
    assert len(out) == 198 and out[:2] == ["0", "1"]
    assert skipped == Skipped(200, (("answer is empty", 1), ("no column 'answer'", 1)))
    assert skipped.line() == "2 rows skipped (1 answer is empty; 1 no column 'answer')"


def test_one_bad_row_over_the_share_stops_naming_the_first_bad_row():
    # 197 good + 3 bad = 200 rows: 3 > 2, the load stops
    with pytest.raises(DataError) as err:
        convert_rows(rows(197, 2, 1), strict, where="t: f.jsonl")
    assert str(err.value) == ("t: f.jsonl: 3 of 200 rows unusable, more than max_bad_fraction "
                              "0.01; row 198: answer is empty (columns: problem, answer)")
    out, skipped = convert_rows(rows(197, 2, 1), strict, where="w", max_bad_fraction=0.02)
    assert (len(out), skipped.count, skipped.rows) == (197, 3, 200)  # 3 <= 2% of 200
    with pytest.raises(DataError, match=r"^w: 1 of 200 rows unusable, more than "
                                        r"max_bad_fraction 0;"):
        convert_rows(rows(199, 1), answer_of, where="w", max_bad_fraction=0)


def test_filtered_rows_are_neither_kept_nor_counted():
    def window(row):  # a date window: rows outside it are not bad, not read
        return None if row["problem"].startswith("p1") else answer_of(row)

    out, skipped = convert_rows(rows(20, 0), window, where="w")
    assert len(out) == 9 and skipped == Skipped(9, ())  # p1 and p10..p19 left out
    assert skipped.line() == ""


def test_the_summary_names_three_reasons_and_counts_the_rest():
    s = Skipped(40, (("a", 3), ("b", 2), ("c", 1), ("d", 1), ("e", 1)))
    assert s.line() == "8 rows skipped (3 a; 2 b; 1 c; 2 for 2 other reasons)"
    assert (s + Skipped(10, (("b", 1),))).reasons == (("a", 3), ("b", 3), ("c", 1), ("d", 1),
                                                        ("e", 1))
    with pytest.raises(ValueError, match="3 rows skipped of only 2 read"):
        Skipped(2, (("a", 3),))
    with pytest.raises(ValueError, match="max_bad_fraction must be a number in"):
        convert_rows([], answer_of, where="w", max_bad_fraction=1.5)


def test_the_summary_is_one_log_line_and_nothing_when_no_row_was_skipped(caplog):
    with caplog.at_level(logging.WARNING, logger="scalerl.data"):
        report_skipped("deepscaler", "hub/x", Skipped(40315, (("no answer", 6),)))
        report_skipped("gsm8k", "hub/y", Skipped(1319, ()))
    assert [r.getMessage() for r in caplog.records] == [
        "deepscaler: hub/x: 6 rows skipped (6 no answer) of 40315 read"]


def test_two_golds_of_one_text_get_distinct_ids_that_do_not_depend_on_order():
    def s(sid, answer):
        return Sample(id=sid, task="t", prompt="Q", answer=answer)

    a, b, c = s("q1", "1"), s("q1", "2"), s("other", "3")
    named = distinct_ids([a, b, c], ["aaaaaaaa11", "bbbbbbbb22", "cc"], ["g", "g", "h"])
    assert [x.id for x in named] == ["q1-aaaaaaaa", "q1-bbbbbbbb", "other"]
    again = distinct_ids([b, a], ["bbbbbbbb22", "aaaaaaaa11"], ["g", "g"])
    assert {x.id for x in again} == {"q1-aaaaaaaa", "q1-bbbbbbbb"}
    # one id over two different texts is left for the task's own check to refuse
    d = s("q1", "9")
    assert [x.id for x in distinct_ids([a, d], ["x", "y"], ["g", "h"])] == ["q1", "q1"]
