"""The code verifier: extraction, the three test formats, comparison rules, result framing, every
status, the `code` kind; the sandbox runs are on the default backend (bwrap)."""

from __future__ import annotations

import json
import os

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_kind
from scalerl.envs.code.asserts import CallCase, convert_check
from scalerl.envs.code.plan import (
    TestFormatError,
    plan_tests,
    stdio_equal,
    untag,
    values_equal,
)
from scalerl.envs.code.verifier import (
    CODE_SYSTEM_PROMPT,
    default_limits,
    extract_code,
    parse_records,
    score_code,
)
from scalerl.envs.grading import Grading
from scalerl.sandbox import SandboxConfig, available_backends

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def bwrap():
    ok, why = available_backends()["bwrap"]
    if not ok:
        if IN_CI:
            pytest.fail(f"bwrap unavailable in CI: {why}")
        pytest.skip(f"bwrap unavailable: {why}")
    return SandboxConfig("bwrap")


def fenced(code: str) -> str:
    return f"<think>plan</think>\n```python\n{code}\n```"


CALL = {"type": "call", "fn_name": "f", "inputs": [[1], [2], [5]], "outputs": [5, 8, 17]}
STDIO = {"type": "stdio", "inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]}


# --- extraction -----------------------------------------------------------------------------
def test_extract_takes_the_last_fenced_block_after_thinking():
    text = "<think>```python\nx=0\n```</think>a\n```python\nx=1\n```\nb\n```py\nx=2\n```\n"
    assert extract_code(text, requires_thinking=True) == "x=2\n"


def test_extract_ignores_blocks_inside_thinking():
    assert extract_code("<think>```python\nx=0\n```</think>", requires_thinking=True) is None


def test_extract_falls_back_to_the_text_after_think():
    assert extract_code("<think>t</think>print(1)\n", requires_thinking=True) == "print(1)\n"


def test_extract_requires_thinking_when_asked():
    assert extract_code("```python\nx=1\n```", requires_thinking=True) is None
    assert extract_code("```python\nx=1\n```", requires_thinking=False) == "x=1\n"
    assert extract_code("<think>never closed ```python\nx=1\n```", requires_thinking=False) is None


def test_extract_accepts_an_unclosed_last_fence():
    assert extract_code("```python\nx = 1\ny = 2", requires_thinking=False) == "x = 1\ny = 2"


def test_extract_empty_answer_is_none():
    assert extract_code("<think>t</think>   \n", requires_thinking=True) is None


# --- comparison -----------------------------------------------------------------------------
def test_stdio_compare_is_per_line_tokenised_and_case_sensitive():
    assert stdio_equal("1  2 \n3\n\n", "1 2\n3")
    assert not stdio_equal("1 2 3", "1 2\n3")  # line structure matters
    assert not stdio_equal("YES", "yes")
    assert not stdio_equal("3\n3", "3")  # several answers are wrong


def test_stdio_float_tolerance_only_when_declared():
    assert not stdio_equal("0.3333333", "0.333333333")
    assert stdio_equal("0.3333333", "0.333333333", float_tol=1e-6)
    assert not stdio_equal("0.3334", "0.3333", float_tol=1e-6)
    assert not stdio_equal("nan", "0.5", float_tol=1e-6)
    assert stdio_equal("nan", "nan", float_tol=1e-6)  # the same token is the same text


def test_values_equal_keeps_python_equality_and_type_of_containers():
    assert values_equal([1, 2], [1, 2])
    assert not values_equal((1, 2), [1, 2])
    assert values_equal(0.1 + 0.2, 0.3, float_tol=1e-9)
    assert not values_equal(0.1 + 0.2, 0.3)
    assert not values_equal([0.30001], [0.3], float_tol=1e-6)


def test_untag_decodes_containers_and_rejects_malformed():
    assert untag({"tuple": [1, [2, {"set": [3]}]]}) == (1, [2, {3}])
    assert untag({"dict": [[{"tuple": [1, 2]}, "a"]]}) == {(1, 2): "a"}
    for bad in ({"tuple": [1], "x": 2}, {"object": []}, {"dict": [[1]]}):
        with pytest.raises(ValueError):
            untag(bad)


# --- result framing ------------------------------------------------------------------------
def test_parse_records_needs_the_nonce_and_flags_repeats():
    out = b"\n".join([
        b'abc {"i": 0, "ok": true, "value": 1}',
        b'{"i": 1, "ok": true, "value": 2}',  # no nonce: ignored
        b'abc {"i": 1, "ok": true, "value": NaN}',  # not strict JSON: ignored
        b'abc {"i": 2, "ok": true, "value": 3}',
        b'abc {"i": 2, "ok": true, "value": 3}',
        b'abc {"i": true, "ok": true}',  # a bool is not an index
        b'abc {"i": 9, "ok": true}',  # out of range
    ])
    records, repeated = parse_records(out, "abc", 3)
    assert sorted(records) == [0, 2]
    assert repeated == {2}


# --- test formats ---------------------------------------------------------------------------
def test_plan_rejects_malformed_tests_in_one_line():
    cases = [
        ({"type": "nope"}, "unknown test type 'nope'; valid: stdio, call, assert"),
        ({"type": "stdio", "inputs": ["1"], "outputs": []}, "1 inputs but 0 outputs"),
        ({"type": "call", "fn_name": "1x", "inputs": [[1]], "outputs": [1]}, "fn_name"),
        ({"type": "call", "fn_name": "f", "inputs": [1], "outputs": [1]}, "argument lists"),
        ({"type": "assert", "test": "def check(c): pass"}, "entry_point"),
    ]
    for tests, message in cases:
        with pytest.raises(TestFormatError, match=message):
            plan_tests(tests, timeout_s=1.0, float_tol=None)


def test_assert_conversion_of_the_common_forms():
    src = """
METADATA = {}
def check(candidate):
    import math
    assert candidate(1, 2) == 3, "msg"
    assert [4] == candidate(2 * 2, 0)
    assert candidate('a') is True
    assert not candidate(0)
    assert candidate(5)
    assert abs(candidate(1.0) - 2.0 / 4.0) < 1e-6
    assert math.fabs(0.5 - candidate(2)) <= 1e-3
    assert tuple(candidate([1])) == tuple([1, 2])
    assert (True)
"""
    # The last line of `src` is a constant assert (the same AST as without the parentheses): it
    # calls nothing, so it yields no case.
    cases = convert_check(src)
    assert [(c.op, c.args, c.expected, c.tol) for c in cases] == [
        ("eq", (1, 2), 3, 0.0), ("eq", (4, 0), [4], 0.0), ("is", ("a",), True, 0.0),
        ("falsy", (0,), None, 0.0), ("truthy", (5,), None, 0.0), ("abs_lt", (1.0,), 0.5, 1e-6),
        ("abs_le", (2,), 0.5, 1e-3), ("eq_tuple", ([1],), (1, 2), 0.0),
    ]
    assert isinstance(cases[0], CallCase) and cases[0].line == 5


def test_assert_conversion_refuses_loops_helpers_and_huge_constants():
    loop = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x\n"
    helper = "def check(candidate):\n    assert candidate(1) == helper(1)\n"
    huge = "def check(candidate):\n    assert candidate(1) == 9 ** 9 ** 9\n"
    assert convert_check(loop) is None
    assert convert_check(helper) is None
    assert convert_check(huge) is None
    assert convert_check("def check(candidate):\n    pass\n") is None  # no evidence at all


def test_call_format_correct_and_wrong(bwrap):
    good = score_code(fenced("def f(x):\n    return 3*x+2"), CALL, requires_thinking=True,
                      sandbox=bwrap)
    assert (good.status, good.detail) == ("correct", "3/3 tests passed")
    bad = score_code(fenced("def f(x):\n    return 3*x+1"), CALL, sandbox=bwrap)
    assert bad.status == "wrong"
    assert bad.detail.startswith("0/3 tests passed; test 0: input [1]: expected 5, got 4")


def test_call_format_solution_class_and_json_outputs(bwrap):
    tests = {"type": "call", "fn_name": "pair", "inputs": [[1, 2]], "outputs": [[2, 1]]}
    code = "class Solution:\n    def pair(self, a, b):\n        return (b, a)"
    assert score_code(fenced(code), tests, sandbox=bwrap).status == "correct"  # tuple as JSON


def test_call_format_apps_unwrapped_outputs(bwrap):
    tests = {"type": "call", "fn_name": "f", "inputs": [[2]], "outputs": [[4]],
             "unwrap_outputs": True}
    assert score_code(fenced("def f(x):\n    return x*x"), tests, sandbox=bwrap).correct


def test_stdio_format_correct_wrong_and_runtime_error(bwrap):
    code = "a, b = map(int, input().split())\nprint(a + b)"
    assert score_code(fenced(code), STDIO, sandbox=bwrap).status == "correct"
    wrong = score_code(fenced("print(3)"), STDIO, sandbox=bwrap)
    assert wrong.status == "wrong" and "1/2 tests passed; test 1: expected '7\\n'" in wrong.detail
    crash = score_code(fenced("print(3)\nraise ValueError('boom')"), STDIO, sandbox=bwrap)
    assert crash.status == "wrong" and "exit code 1" in crash.detail and "boom" in crash.detail


def test_stdio_float_outputs_declared_in_tests_or_options(bwrap):
    tests = {"type": "stdio", "inputs": ["3\n"], "outputs": ["0.333333333\n"]}
    code = "print(round(1 / int(input()), 7))"
    assert score_code(fenced(code), tests, sandbox=bwrap).status == "wrong"
    assert score_code(fenced(code), tests, sandbox=bwrap, float_outputs=True).correct
    assert score_code(fenced(code), {**tests, "float_outputs": True}, sandbox=bwrap).correct


def test_assert_format_converted_and_fallback(bwrap):
    converted = {"type": "assert", "entry_point": "add",
                 "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
    loop = {"type": "assert", "entry_point": "add",
            "test": "def check(candidate):\n    for x in range(5):\n"
                    "        assert candidate(x, x) == 2 * x\n"}
    for tests in (converted, loop):
        assert score_code(fenced("def add(a, b):\n    return a + b"), tests, sandbox=bwrap).correct
        s = score_code(fenced("def add(a, b):\n    return a - b"), tests, sandbox=bwrap)
        assert s.status == "wrong", s


def test_a_check_that_never_calls_the_candidate_is_an_error(bwrap):
    tests = {"type": "assert", "entry_point": "add",
             "test": "def check(candidate):\n    for x in []:\n        assert candidate(x)\n"}
    s = score_code(fenced("def add(a, b):\n    return a + b"), tests, sandbox=bwrap)
    assert s.status == "error" and "check() never called the candidate" in s.detail, s


def test_per_test_deadline_gives_timeout_and_keeps_going(bwrap):
    code = "def f(x):\n    while x == 2:\n        pass\n    return 3*x+2"
    s = score_code(fenced(code), CALL, sandbox=bwrap, test_timeout_s=0.5)
    assert s.status == "timeout" and "2/3 tests passed; test 1: time limit 0.5 s" in s.detail
    s = score_code(fenced("import time\ntime.sleep(5)"), STDIO, sandbox=bwrap, test_timeout_s=0.5)
    assert s.status == "timeout" and s.latency_s < 4


def test_a_wrong_answer_outranks_a_timeout(bwrap):
    code = "def f(x):\n    while x == 5:\n        pass\n    return 0"
    assert score_code(fenced(code), CALL, sandbox=bwrap, test_timeout_s=0.5).status == "wrong"


def test_no_code_is_no_answer_and_bad_tests_are_error(bwrap):
    assert score_code("no code here", CALL, requires_thinking=True).status == "no_answer"
    s = score_code(fenced("x=1"), {"type": "call"}, sandbox=bwrap)
    assert s.status == "error" and s.detail.startswith("tests: ")


def test_tests_that_are_not_an_object_are_error():
    s = score_code(fenced("x=1"), [1, 2], requires_thinking=True)
    assert s.status == "error" and "tests must be a JSON object, got list" in s.detail


def test_kind_options_from_a_spec_file_may_give_limits_as_a_mapping(bwrap):
    sample = Sample(id="1", task="t", prompt="p", tests=STDIO)
    opts = {"limits": {"wall_s": 0.5, "cpu_s": 0.5}}
    s = get_kind("code").score(sample, fenced("import time\ntime.sleep(3)"), opts,
                               Grading(bwrap))
    assert s.status == "timeout" and s.latency_s < 2.5, s


def test_a_backend_that_cannot_run_here_is_error_not_wrong(monkeypatch):
    from scalerl.sandbox.base import BACKENDS

    # A backend that is registered but cannot run on this machine (as bwrap without bubblewrap).
    monkeypatch.setattr(BACKENDS["process"], "available", classmethod(lambda cls: (False, "no")))
    s = score_code(fenced("def f(x):\n    return 3*x+2"), CALL, sandbox=SandboxConfig("process"))
    assert s.status == "error" and "sandbox backend 'process' is not available here" in s.detail


def test_code_kind_scores_samples_and_names_its_gold_field(bwrap):
    kind = get_kind("code")
    assert (kind.gold_field, kind.system_prompt) == ("tests", CODE_SYSTEM_PROMPT)
    sample = Sample(id="1", task="t", prompt="p", tests=json.loads(json.dumps(CALL)))
    opts = {"requires_thinking": True}
    grading = Grading(bwrap)
    assert kind.score(sample, fenced("def f(x):\n    return 3*x+2"), opts, grading).correct
    assert kind.score(Sample(id="2", task="t", prompt="p"), "x", opts, grading).status == "error"
    refused = kind.score(sample, fenced("def f(x):\n    return 3*x+2"), {"backend": "docker"})
    assert refused.status == "error" and "the sandbox is the run's sandbox.backend" in (
        refused.detail)


def test_default_run_limits_follow_the_sandbox_config():
    # start-up + 3 tests' deadlines, under the cap
    assert default_limits(3, 4.0, SandboxConfig()).wall_s == 15.0
    limits = default_limits(100, 4.0, SandboxConfig(memory_mb=256, max_run_s=10.0))
    assert (limits.wall_s, limits.cpu_s, limits.memory_mb) == (10.0, 10.0, 256)
