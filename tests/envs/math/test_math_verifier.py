"""The math verifier: every status, thinking, boxed extraction, gold wrapping, the exact-rational
pre-check, length caps, a killed worker, and agreement with math-verify's reference cases."""

from __future__ import annotations

import json
import os
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_kind
from scalerl.envs.math import verifier as vmath
from scalerl.envs.math.verifier import (
    MATH_SYSTEM_PROMPT,
    check_answer,
    exact_value,
    last_boxed_run,
    make_pool,
    parse_gold,
    score_math,
    score_math_many,
    shared_pool,
    strip_thinking,
)

REFERENCE = Path("/work/shared/data/math-verify-reference-cases.json")
REFERENCE_IN_REPO = Path(__file__).parent / "data" / "math-verify-reference-cases.json"
DEEP_BRACES = "$" + "{" * 3000 + "1" + "}" * 3000 + "$"  # math-verify parses this for ~20 s


@pytest.fixture(scope="module")
def pool():
    p = make_pool(2)
    yield p
    p.shutdown()
    vmath.shutdown_pools()  # the shared pools, if a test (the kind) started one


def score(completion: str, gold: str, pool, **kw):
    return score_math(completion, gold, pool=pool, **kw)


# --- thinking -------------------------------------------------------------------------------
def test_strip_thinking_keeps_what_follows_the_last_close_tag():
    text = "<think>a</think> draft \\boxed{1} <think>b</think> final \\boxed{2}"
    assert strip_thinking(text, requires_thinking=True) == " final \\boxed{2}"


def test_strip_thinking_without_close_tag():
    assert strip_thinking("just \\boxed{2}", requires_thinking=False) == "just \\boxed{2}"
    assert strip_thinking("just \\boxed{2}", requires_thinking=True) is None
    assert strip_thinking("<think>cut off \\boxed{2}", requires_thinking=False) is None


def test_an_answer_inside_the_thinking_does_not_count(pool):
    s = score("<think>maybe \\boxed{7}</think> so it is \\boxed{8}", "7", pool)
    assert s.status == "wrong"
    s = score("<think>maybe \\boxed{7}</think> so it is \\boxed{7}", "7", pool)
    assert s.status == "correct"


def test_required_thinking_without_close_tag_is_no_answer(pool):
    s = score("\\boxed{7}", "7", pool, requires_thinking=True)
    assert s.status == "no_answer" and "no </think>" in s.detail


# --- statuses -------------------------------------------------------------------------------
def test_correct(pool):
    s = score("<think>3/4 of it</think>The answer is $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}",
              pool)
    assert s.status == "correct"
    assert s.latency_s > 0


def test_wrong(pool):
    s = score("so \\boxed{\\frac{2}{3}}", "\\frac{3}{4}", pool)
    assert s.status == "wrong"
    assert "2}{3}" in s.detail


def test_no_answer_when_nothing_can_be_extracted(pool):
    s = score("I do not know.", "12", pool)
    assert s.status == "no_answer"


def test_timeout_on_an_adversarial_input_is_bounded(pool, caplog):
    t0 = time.monotonic()
    with caplog.at_level("WARNING", logger="scalerl.envs.math.verifier"):
        s = score(DEEP_BRACES, "1", pool, timeout_s=1.0)
    assert s.status == "timeout"
    assert "killed and replaced" in s.detail
    assert time.monotonic() - t0 < 6
    [record] = [r for r in caplog.records if "math verifier timeout" in r.getMessage()]
    assert len(record.getMessage()) < 700  # the 6,000-char input is cut in the log line
    assert score("\\boxed{5}", "5", pool).status == "correct"  # the pool still works


def test_a_killed_worker_gives_error_and_the_pool_keeps_working():
    one = make_pool(1)  # one worker: the one the check runs on
    try:
        score("\\boxed{1/2}", "1/2", one)  # warm: the worker exists, dispatch is immediate
        [pid] = one.worker_pids()
        holder: dict = {}
        thread = threading.Thread(target=lambda: holder.update(
            s=score(DEEP_BRACES, "1", one, timeout_s=60)))
        thread.start()
        time.sleep(0.5)  # let the check start parsing
        os.kill(pid, 9)
        thread.join(60)
        s = holder["s"]
        assert s.status == "error"
        assert f"pid {pid} died mid-check (killed by signal SIGKILL)" in s.detail
        assert score("\\boxed{5/2}", "5/2", one).status == "correct"
    finally:
        one.shutdown()


def test_bad_inputs_are_errors_not_exceptions(pool):
    assert score(None, "1", pool).status == "error"  # type: ignore[arg-type]
    bad = score_math_many(["just a string", ("\\boxed{1}", "1")], pool=pool)  # type: ignore[list-item]
    assert [s.status for s in bad] == ["error", "correct"]
    assert score("\\boxed{1}", None, pool).status == "error"  # type: ignore[arg-type]
    s = score("\\boxed{1}", "   ", pool)
    assert (s.status, s.detail) == ("error", "gold answer is empty")


def test_other_rows_are_scored_while_one_is_stuck(pool):
    items = [(DEEP_BRACES, "1")] + [(f"\\boxed{{{i}}}", str(i)) for i in range(30)]
    t0 = time.monotonic()
    scores = score_math_many(items, pool=pool, timeout_s=3.0)
    assert scores[0].status == "timeout"
    assert [s.status for s in scores[1:]] == ["correct"] * 30
    assert sum(s.latency_s for s in scores[1:]) < 3.0  # done on the free worker meanwhile
    assert time.monotonic() - t0 < 8


# --- exact rationals ------------------------------------------------------------------------
def test_close_rationals_are_not_equal(pool):
    from math_verify import parse, verify

    # math-verify alone calls them equal (its numeric comparison chops tiny differences) ...
    g, p = parse("$\\frac{1}{2^{98}}$", parsing_timeout=None), parse("$1/2^{99}$",
                                                                      parsing_timeout=None)
    assert verify(g, p, timeout_seconds=None) is True
    # ... the pre-check does not.
    assert score("\\boxed{1/2^{99}}", "\\frac{1}{2^{98}}", pool).status == "wrong"
    assert score("\\boxed{2^{-98}}", "\\frac{1}{2^{98}}", pool).status == "correct"


def test_a_decimal_still_matches_its_fraction(pool):
    assert score("\\boxed{0.5}", "\\frac{1}{2}", pool).status == "correct"
    assert score("the answer is 0.5", "\\frac{1}{2}", pool).status == "correct"


def test_exact_value_accepts_only_rational_arithmetic():
    """Rationals and decimals as written (a Float's printed digits), with +, * and integer
    powers; nothing irrational, symbolic, infinite or too big."""
    import sympy

    two = sympy.Integer(2)
    assert exact_value(sympy.Mul(3, sympy.Pow(two, -5, evaluate=False), evaluate=False)) == \
        pytest.approx(3 / 32, abs=0) and exact_value(sympy.Rational(3, 32)).denominator == 32
    assert exact_value(sympy.sqrt(2)) is None
    assert exact_value(sympy.Float("0.0000672")) == Fraction(672, 10**7)
    assert exact_value(sympy.Float("18.90")) == Fraction(189, 10)
    assert exact_value(sympy.Float("0.1")) == Fraction(1, 10)  # the literal, not the binary 0.1
    assert exact_value(sympy.Float("inf")) is None and exact_value(sympy.Float("1e99999")) is None
    assert exact_value(sympy.Symbol("x") + 1) is None
    tower = sympy.Pow(two, sympy.Pow(two, 100, evaluate=False), evaluate=False)
    assert exact_value(tower) is None  # too big to compare exactly: math-verify decides


# --- extraction -------------------------------------------------------------------------------
def test_boxed_comes_before_other_answers(pool):
    text = "Answer: $5$. Checking again, I get \\boxed{6} and that is final."
    assert score(text, "6", pool).status == "correct"


def test_boxed_only_mode(pool):
    text = "The answer is $\\frac{1}{2}$."
    assert score(text, "\\frac{1}{2}", pool).status == "correct"
    s = score(text, "\\frac{1}{2}", pool, boxed_only=True)
    assert s.status == "no_answer" and "boxed" in s.detail
    assert score("so \\boxed{\\frac12}.", "1/2", pool, boxed_only=True).status == "correct"


def test_adjacent_boxed_answers_are_read_together(pool):
    text = "The integers are \\boxed{-2} and \\boxed{1}."
    assert score(text, "1, -2", pool).status == "correct"
    assert score(text, "1, -2", pool, boxed_only=True).status == "correct"
    assert score(text, "1", pool).status == "wrong"


def test_last_boxed_run_keeps_only_the_final_group():
    text = "first \\boxed{9}, then $\\boxed{-2}$ and $\\boxed{1}$."
    assert last_boxed_run(text) == "\\boxed{-2}$ and $\\boxed{1}"
    assert last_boxed_run("\\boxed{\\frac{1}{2}} x") == "\\boxed{\\frac{1}{2}}"
    assert last_boxed_run("none here") is None


def test_verdicts_are_remembered_per_gold_and_parsed_answer():
    vmath._VERDICTS.clear()
    assert check_answer("so \\boxed{2\\sqrt{3}}", "\\sqrt{12}", False)[0] == "correct"
    assert check_answer("thus $\\boxed{2\\sqrt{3}}$.", "\\sqrt{12}", False)[0] == "correct"
    assert len(vmath._VERDICTS) == 1  # the second completion reused the first verdict
    assert check_answer("so \\boxed{2\\sqrt{3}}", "\\sqrt{13}", False)[0] == "wrong"
    assert check_answer("so \\boxed{3\\sqrt{2}}", "\\sqrt{12}", False)[0] == "wrong"
    assert len(vmath._VERDICTS) == 3


# --- gold answers -----------------------------------------------------------------------------
def test_raw_latex_gold_is_wrapped_before_parsing():
    from math_verify import parse

    assert parse("2\\sqrt{3}", parsing_timeout=None)[0] == 2  # raw: silently the wrong number
    assert str(parse_gold("2\\sqrt{3}")[0]) == "2*sqrt(3)"
    assert parse("\\sqrt{2}", parsing_timeout=None) == []  # raw: unparseable
    assert parse_gold("\\sqrt{2}")
    assert parse_gold("(1,2)")  # plain text that only parses inside $...$


def test_raw_latex_gold_scores_right(pool):
    assert score("\\boxed{2\\sqrt{3}}", "2\\sqrt{3}", pool).status == "correct"
    assert score("\\boxed{2}", "2\\sqrt{3}", pool).status == "wrong"
    assert score("\\boxed{[0,\\infty)}", "[0, \\infty)", pool).status == "correct"


def test_unparseable_gold_is_an_error(pool):
    s = score("\\boxed{1}", "$$", pool)
    assert s.status == "error" and "gold" in s.detail


# --- length caps ------------------------------------------------------------------------------
def test_a_huge_completion_is_cut_and_says_so(pool):
    text = "blah " * 400_000 + "so \\boxed{42}"  # 2 MB
    s = score(text, "42", pool)
    assert s.status == "correct"
    assert f"last {vmath.MAX_ANSWER_CHARS} of {len(text)} chars" in s.detail
    assert s.latency_s < 5


def test_details_are_truncated(pool):
    s = score("\\boxed{" + "1" * 5000 + "}", "2", pool)
    assert s.status == "wrong"
    assert len(s.detail) < 400


def test_the_kind_checks_in_the_pool_of_the_run_s_math_workers():
    from scalerl.envs.grading import Grading, VerifierConfig

    sample = Sample(id="x", task="t", prompt="", answer="1/2")
    grading = Grading(verifiers=VerifierConfig(math_workers=1))
    s = get_kind("math").score(sample, "\\boxed{\\frac{1}{2}}", {}, grading)  # needs the pool
    assert s.status == "correct"
    one = shared_pool(1)
    assert one.size == 1 and one.worker_pids(), "the 1-worker pool did the check"
    assert shared_pool(1) is one
    from scalerl.envs.deadline_pool import default_size

    assert shared_pool(None) is shared_pool(default_size())  # one pool for one size
    with pytest.raises(ValueError, match="pool size must be >= 1, got 0"):
        shared_pool(0)


# --- the registered kind ------------------------------------------------------------------------
def test_math_kind_is_registered():
    kind = get_kind("math")
    assert kind.gold_field == "answer"
    assert "\\boxed{}" in kind.system_prompt and kind.system_prompt == MATH_SYSTEM_PROMPT
    sample = Sample(id="1", task="t", prompt="1+1?", answer="2")
    assert kind.score(sample, "\\boxed{2}", {}).status == "correct"
    assert kind.score(sample, "It is 2", {"boxed_only": True}).status == "no_answer"
    assert kind.score(sample, "\\boxed{2}", {"requires_thinking": True}).status == "no_answer"
    s = kind.score(sample, "\\boxed{2}", {"boxed-only": True})
    assert s.status == "error"
    assert s.detail == ("unknown math option(s) boxed-only; valid: requires_thinking, boxed_only,"
                        " timeout_s")


# --- agreement with math-verify's own test cases --------------------------------------------
def test_agreement_with_math_verify_reference_cases(pool):
    path = REFERENCE if REFERENCE.exists() else REFERENCE_IN_REPO
    if not path.exists():
        pytest.fail(f"reference cases missing: neither {REFERENCE} nor {REFERENCE_IN_REPO}")
    cases = json.loads(path.read_text())
    scores = score_math_many([(c["pred"], c["gold"]) for c in cases], pool=pool, timeout_s=20)
    disagreements = [
        (c["gold"][:60], c["pred"][-80:], c["expected"], s.status, s.detail[:120])
        for c, s in zip(cases, scores, strict=True)
        if int(s.status == "correct") != c["expected"]
    ]
    for d in disagreements:
        print("disagree:", d)
    agreement = 1 - len(disagreements) / len(cases)
    print(f"agreement {agreement:.4f} on {len(cases)} cases")
    assert len(cases) == 231
    assert agreement >= 0.97
