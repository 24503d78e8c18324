"""What a comparison rule gives a sandbox run: test inputs streamed one test at a time (the
memory cap binds the candidate, not the harness's copy of every input), LiveCodeBench's global
wall and 50,000-digit ints, and the `compare` choice from options or the test JSON. The sandbox
runs are on the default backend (bwrap)."""

from __future__ import annotations

import marshal
import os

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_kind
from scalerl.envs.code.plan import plan_tests
from scalerl.envs.code.rules import get_rule
from scalerl.envs.code.verifier import data_mb, default_limits, score_code
from scalerl.sandbox import SandboxConfig, available_backends


@pytest.fixture(scope="module")
def bwrap():
    ok, why = available_backends()["bwrap"]
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bwrap unavailable in CI: {why}")
        pytest.skip(f"bwrap unavailable: {why}")
    return SandboxConfig("bwrap")


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_the_spec_holds_no_test_input_the_frames_hold_each_once():
    tests = {"type": "stdio", "inputs": ["secret-1\n", "secret-22\n"], "outputs": ["a", "b"]}
    plan = plan_tests(tests, timeout_s=1.0, float_tol=None)
    assert "secret" not in repr(plan.spec) and plan.spec["n"] == 2
    first = marshal.loads(plan.frames)
    assert first == b"secret-1\n" and plan.frames.count(b"secret") == 2
    assert plan.largest_input == len(b"secret-22\n")
    calls = plan_tests({"type": "call", "fn_name": "f", "inputs": [[1, "x"]], "outputs": [2]},
                       timeout_s=1.0, float_tol=None)
    assert "calls" not in calls.spec and marshal.loads(calls.frames) == {"args": [1, "x"],
                                                                       "kwargs": {}}


def test_run_limits_follow_the_rule_and_leave_room_for_the_data():
    sandbox = SandboxConfig(memory_mb=256, max_run_s=10.0)
    assert default_limits(100, 4.0, sandbox).wall_s == 10.0  # the verifier's own, capped
    lcb = default_limits(30, 6.0, sandbox, rule=get_rule("lcb"))
    assert (lcb.wall_s, lcb.cpu_s) == (215.0, 215.0)  # (6 + 1) * 30 + 5, as LiveCodeBench
    assert default_limits(3, 4.0, sandbox, data_bytes=5 << 20).memory_mb == 256 + 8
    assert (data_mb(1000), data_mb(1 << 20), data_mb(3 << 20), data_mb((64 << 20) + 1)) == (
        0, 1, 4, 128)
    assert default_limits(3, 4.0, sandbox, expected_bytes=10 << 20).output_bytes == 36 << 20


def test_large_inputs_reach_the_program_under_a_cap_smaller_than_all_of_them(bwrap):
    """64 MB of inputs in all, under a 48 MiB cap: the harness holds one 8 MB input at a time
    (it held every one, as bytes and as text, before)."""
    size = 8 << 20
    tests = {"type": "stdio", "inputs": [chr(97 + i) * size for i in range(8)],
             "outputs": [f"{size} {chr(97 + i)}" for i in range(8)]}
    program = "import sys\nd = sys.stdin.buffer.read()\nprint(len(d), chr(d[-1]))"
    small = SandboxConfig("bwrap", memory_mb=48)
    got = score_code(fenced(program), tests, sandbox=small)
    assert (got.status, got.detail) == ("correct", "8/8 tests passed")
    greedy = score_code(fenced("x = bytearray(200 << 20)\n" + program), tests, sandbox=small)
    assert greedy.status == "wrong", greedy.detail  # the cap still binds the candidate


def test_lcb_gives_programs_50000_digit_ints_and_the_default_does_not(bwrap):
    stdio = {"type": "stdio", "inputs": ["9999\n"], "outputs": ["10000"]}
    program = fenced("n = int(input())\nprint(len(str(10 ** n)))")
    assert score_code(program, stdio, sandbox=bwrap, compare="lcb").status == "correct"
    plain = score_code(program, stdio, sandbox=bwrap)
    assert plain.status == "wrong" and "int_max_str_digits" in plain.detail  # Python's 4300
    call = {"type": "call", "fn_name": "f", "inputs": [[9999]], "outputs": [10000],
            "compare": "lcb"}
    fn = fenced("def f(n):\n    return len(str(10 ** n))")
    assert score_code(fn, call, sandbox=bwrap).status == "correct"


def test_compare_comes_from_the_options_or_the_test_json_and_is_checked(bwrap):
    tests = {"type": "stdio", "inputs": [""], "outputs": ["a b\n"]}
    spaced = fenced("print('a  b')")
    assert score_code(spaced, tests, sandbox=bwrap).status == "correct"  # tokens
    assert score_code(spaced, tests, sandbox=bwrap, compare="lcb").status == "wrong"
    assert score_code(spaced, dict(tests, compare="lcb"), sandbox=bwrap).status == "wrong"
    bad = score_code(spaced, dict(tests, compare="nope"), sandbox=bwrap)
    assert (bad.status, bad.detail) == ("error", "tests: unknown comparison rule 'nope'; valid: "
                                                 "tokens, lcb, taco")
    kind = get_kind("code")
    assert kind.preflight({"compare": "nope"}, None) == (
        "code option compare: unknown comparison rule 'nope'; valid: tokens, lcb, taco")
    sample = Sample(id="s", task="t", prompt="", tests=tests)
    assert kind.score(sample, spaced, {"compare": "lcb"}).status == "wrong"
