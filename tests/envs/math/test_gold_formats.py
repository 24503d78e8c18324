"""The math verifier on every gold format of the math benchmarks and training sets, from real rows.

tests/envs/math/data/gold_formats.json holds real rows of MATH-500, AIME 2024/2025, AMC 2023,
GSM8K, and MATH rows laid out as DeepScaleR and Polaris lay theirs, one or more per gold format
(thousands separators, escaped dollars, `\\text{(C)}`, degrees, intervals, tuples, sets, matrices,
mixed numbers, units, base subscripts, zero-padded AIME answers, AMC floats); for each, answers a
model may box (several ways of writing the gold) with the verdict a careful grader gives, and
near-misses (off by one, rounded, scaled by 100, an open end for a closed one, a missing element),
which are never `correct`. The same pairs are checked against math-verify run here, and against
the verdicts of Qwen2.5-Math's and DeepScaleR's graders (run from their own source when the file
was made: they need a pinned antlr that math-verify's cannot share a venv with); every pair on
which a reference differs is listed with its reason (docs/benchmarks.md). Every gold of the five
benchmarks' test splits is checked too: its own value boxed is `correct`, the integer after it is
not.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from scalerl.envs.bench import math_sets  # noqa: F401 - registers the math benchmarks
from scalerl.envs.bench.math_sets import gsm8k_answer, math_gold, number_answer
from scalerl.envs.bench.task import BENCHMARKS
from scalerl.envs.catalog import get_task
from scalerl.envs.math.verifier import make_pool, score_math_many

DATA = json.loads((Path(__file__).parent / "data" / "gold_formats.json").read_text())
CASES = DATA["cases"]
TASKS = ("math500", "aime24", "aime25", "amc23", "gsm8k", "deepscaler", "polaris")


@pytest.fixture(scope="module")
def pool():
    p = make_pool(2)
    yield p
    p.shutdown()


def completion(answer: str) -> str:
    return f"The final answer is $\\boxed{{{answer}}}$."


def gold_of(case: dict) -> str:
    """The gold the task grades against, read from the real row by the task's own row mapper."""
    row = DATA["rows"][case["task"]][case["row"]]
    return BENCHMARKS[case["task"]].to_sample(row, case["task"]).answer


@pytest.fixture(scope="module")
def verdicts(pool):
    items = [(completion(c["answer"]), gold_of(c)) for c in CASES]
    return [s.status for s in score_math_many(items, pool=pool, timeout_s=30)]


def test_the_fixture_covers_every_task_and_both_kinds_of_answer():
    assert {c["task"] for c in CASES} == set(TASKS)
    for task in TASKS:
        kinds = {c["expected"] for c in CASES if c["task"] == task}
        assert kinds == {"correct", "wrong"}, task
    formats = {c["format"] for c in CASES}
    for needed in ("escaped dollars", "thousands \\!", "multiple choice \\text{(C)}", "degrees",
                   "half-open ray", "zero-padded AIME answer", "AMC float", "base subscript"):
        assert needed in formats
    assert len(CASES) == 506


def test_every_format_correct_answers_pass_and_near_misses_never_do(verdicts):
    wrong = [(c["task"], c["format"], c["answer"], c["expected"], got)
             for c, got in zip(CASES, verdicts, strict=True) if got != c["expected"]]
    assert not wrong, f"{len(wrong)} of {len(CASES)} pairs graded otherwise: {wrong[:10]}"
    near_misses = [c for c in CASES if c["expected"] == "wrong"]
    assert len(near_misses) > 200 and all(v != "correct" for c, v in zip(CASES, verdicts,
                                                                          strict=True)
                                          if c["expected"] == "wrong")


def test_escaped_dollar_golds_parse_and_grade(pool):
    golds = [r"\$32,\!348", r"\$18.90", r"\$36"]
    answers = [r"\boxed{32348}", r"\boxed{\$18.9}", r"\boxed{36 \text{ dollars}}",
               r"\boxed{32,349}", r"\boxed{1890}", r"\boxed{35}"]
    scores = score_math_many(list(zip(answers, golds * 2, strict=True)), pool=pool)
    assert [s.status for s in scores] == ["correct"] * 3 + ["wrong"] * 3, scores


def test_math_verify_agrees_on_every_pair_but_the_listed_ones(verdicts):
    from math_verify import parse, verify

    differs = []
    for case, ours in zip(CASES, verdicts, strict=True):
        gold, text = f"${gold_of(case)}$", completion(case["answer"])
        theirs = "correct" if verify(parse(gold, parsing_timeout=None),
                                     parse(text, parsing_timeout=None),
                                     timeout_seconds=None) else "wrong"
        listed = "math_verify_differs" in case
        if (theirs != ours) != listed:
            differs.append((case["task"], case["answer"], ours, theirs, listed))
    assert not differs, differs
    listed = [c for c in CASES if "math_verify_differs" in c]
    assert [c["answer"] for c in listed] == ["0.0000673"]  # its 6-decimal rounding


@pytest.mark.parametrize("reference", ["qwen", "deepscaler"])
def test_reference_graders_differ_only_where_a_reason_is_listed(reference):
    """The recorded verdicts of Qwen2.5-Math's and DeepScaleR's graders: where one differs from
    the expected verdict, the pair names the reason (a class of `differences`); where it agrees,
    none. Their false positives are the near-misses they call correct."""
    agree = differ = 0
    for case in CASES:
        why = case.get(f"{reference}_differs")
        if case[reference] == case["expected"]:
            assert why is None, case
            agree += 1
        else:
            assert f"{reference}/{why}" in DATA["differences"], case
            differ += 1
    assert agree + differ == len(CASES)
    assert differ == {"qwen": 56, "deepscaler": 25}[reference]


def _all_gold_pairs() -> list[tuple[str, str, str]]:
    golds, pairs = DATA["all_golds"], []
    for g in golds["math500"]:
        gold = math_gold({"answer": g})
        pairs.append((f"So the answer is $\\boxed{{{g}}}$.", gold, "correct"))
        if gold.lstrip("-").isdigit():
            pairs.append((f"\\boxed{{{int(gold) + 1}}}", gold, "wrong"))
    for task in ("aime24", "aime25", "amc23"):
        for g in golds[task]:
            gold = number_answer(g)
            pairs.append((f"\\boxed{{{g}}}", gold, "correct"))
            if gold.lstrip("-").isdigit():
                pairs.append((f"\\boxed{{{int(gold) + 1}}}", gold, "wrong"))
    for g in golds["gsm8k"]:
        gold = gsm8k_answer(f"#### {g}")
        pairs.append((f"The answer is \\boxed{{{g}}}.", gold, "correct"))
        pairs.append((f"The answer is \\boxed{{{Decimal(gold) + 1}}}.", gold, "wrong"))
    return pairs


def test_every_gold_of_the_five_benchmarks_grades_its_own_value(pool):
    pairs = _all_gold_pairs()
    assert len(DATA["all_golds"]["math500"]) == 500 and len(DATA["all_golds"]["gsm8k"]) == 1319
    scores = score_math_many([(a, g) for a, g, _ in pairs], pool=pool, timeout_s=30)
    bad = [(a, g, want, s.status, s.detail) for (a, g, want), s in zip(pairs, scores,
                                                                         strict=True)
           if s.status != want]
    assert not bad, f"{len(bad)} of {len(pairs)}: {bad[:10]}"
    assert len(pairs) > 3500


def test_the_rows_load_as_local_copies_and_their_solutions_grade_correct(tmp_path, pool):
    """Each task reads its rows as a `--data` copy in the hub's schema; the reference solution a
    row carries (MATH's worked solution, the gold boxed for the others) is `correct`."""
    items = []
    for task in TASKS:
        path = tmp_path / f"{task}.jsonl"
        rows = list(DATA["rows"][task].values())
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        hub = get_task(task).with_data(str(path))
        samples = [s for split in hub.splits for s in hub.samples(split)]
        assert len(samples) == len(rows), task
        items += [(s.meta["solution"], s.answer) for s in samples]
    scores = score_math_many(items, pool=pool, timeout_s=30)
    assert [s.status for s in scores] == ["correct"] * len(items), [
        (g, s.detail) for (_, g), s in zip(items, scores, strict=True) if s.status != "correct"]
