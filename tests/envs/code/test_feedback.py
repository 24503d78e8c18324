"""`tests_feedback` on the built-in code benchmarks' fixture rows (hub schema), in the real sandbox.

A wrong program gets one user message naming the failing public test with its input, expected and
actual output, and nothing of the private tests; a program right on the public tests ends the
episode (the private tests then judge: a program hard-coding the public answer is still `wrong`);
a timeout is reported as one; no program ends the episode; the caps hold; a fixed second answer
ends it. Every gold solution of the fixtures, and every HumanEval canonical solution, passes its
own public tests (so feedback never calls a correct program wrong). In CI (`CI=true`) a missing
bwrap or docker fails instead of skipping.
"""

from __future__ import annotations

import doctest
import os

import bench_fixtures as bf
import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.code.feedback import TestsFeedback, with_feedback
from scalerl.envs.code.public import WRONG_EXAMPLES, docstring_examples, public_tests
from scalerl.envs.code.verifier import extract_code
from scalerl.envs.environment import EnvContext, SessionFailed, environment_factory
from scalerl.envs.grading import Grading
from scalerl.sandbox import SandboxConfig, available_backends

IN_CI = os.environ.get("CI") == "true"
pytestmark = pytest.mark.bwrap


def _require(name: str) -> None:
    ok, why = available_backends()[name]
    if not ok:
        if IN_CI:
            pytest.fail(f"sandbox backend {name!r} unavailable in CI: {why}")
        pytest.skip(f"sandbox backend {name!r} unavailable: {why}")


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    _require("bwrap")
    return bf.write_all(tmp_path_factory.mktemp("bench"))


def samples(name: str, copies) -> dict:
    task = get_task(name).with_data(copies[name])
    return {s.id: s for s in task.samples("test")}


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def play(env, sample, *answers, grading: Grading | None = None):
    """The environment's replies to `answers`, one assistant turn each, as the turn loop plays
    them (the transcript grows with each answer and each observation)."""
    state = env.start(sample, EnvContext(grading=grading or Grading()))
    transcript, replies = list(sample.messages()), []
    for answer in answers:
        transcript.append({"role": "assistant", "content": answer})
        reply = env.step(sample, transcript, state)
        replies.append(reply)
        transcript.extend(reply.messages)
    return replies


def feedback_text(reply) -> str:
    assert not reply.done and len(reply.messages) == 1
    assert reply.messages[0]["role"] == "user"
    return reply.messages[0]["content"]


# --- LiveCodeBench: public_test_cases shown, private_test_cases judge ---------------------------
def test_livecodebench_public_tests_are_its_public_test_cases(copies):
    by_id = samples("livecodebench", copies)
    first = by_id["abc001_a"]  # public 3 -> 9; private 12, 0, 999999999
    assert public_tests(first.tests)["inputs"] == ["3\n"]
    assert public_tests(first.tests)["outputs"] == ["9\n"]
    assert len(first.tests["inputs"]) == 4  # the judge still has all four
    call = public_tests(by_id["3001"].tests)
    assert (call["type"], call["fn_name"], call["inputs"], call["outputs"]) == (
        "call", "sumOf", [[[1, 2, 3]]], [6])


def test_a_wrong_program_gets_the_failing_public_test_and_nothing_private(copies):
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]))
    sample = samples("livecodebench", copies)["abc001_a"]
    (reply,) = play(task.environment, sample, fenced("n = int(input())\nprint(n + n)"))
    text = feedback_text(reply)
    assert "failed 1 of the 1 public test" in text
    assert "Test 1: failed" in text
    assert "Input: 3" in text and "Expected: 9" in text and "Got: 6" in text
    for private in ("12", "144", "999999999", "999999998000000001"):
        assert private not in text
    assert "complete corrected solution" in text


def test_a_functional_problem_shows_the_call_expected_and_returned(copies):
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]))
    sample = samples("livecodebench", copies)["3001"]
    wrong = "class Solution:\n    def sumOf(self, nums):\n        return sum(nums) + 1"
    text = feedback_text(play(task.environment, sample, fenced(wrong))[0])
    assert "Input: sumOf([1, 2, 3])" in text and "Expected: 6" in text
    assert "Got: returned 7" in text
    assert str(10**18 + 1) not in text and "[-5, 5]" not in text  # private inputs/outputs


def test_right_on_the_public_tests_ends_the_episode_and_the_private_tests_judge(copies):
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]))
    sample = samples("livecodebench", copies)["abc001_a"]
    hard_coded = fenced("print(9)")  # the public answer only
    (reply,) = play(task.environment, sample, hard_coded)
    assert reply.done and not reply.messages
    assert task.score(sample, hard_coded).status == "wrong"  # 12 -> 144 is private
    gold = fenced(bf.LCB_GOLD["abc001_a"])
    assert play(task.environment, sample, gold)[0].done
    assert task.score(sample, gold).status == "correct"


def test_a_fixed_second_answer_ends_the_episode(copies):
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]),
                         max_turns=3)
    sample = samples("livecodebench", copies)["abc003_c"]  # A + B
    first, second = play(task.environment, sample,
                         fenced("a, b = map(int, input().split())\nprint(a - b)"),
                         fenced(bf.LCB_GOLD["abc003_c"]))
    assert "Expected: 3" in feedback_text(first) and "Got: -1" in feedback_text(first)
    assert second.done and not second.messages


def test_a_program_that_runs_too_long_is_reported_as_a_timeout(copies):
    task = get_task("livecodebench").with_data(copies["livecodebench"])
    env = TestsFeedback(verifier_options={**task.verifier_options(), "test_timeout_s": 1.0})
    sample = samples("livecodebench", copies)["abc001_a"]
    text = feedback_text(play(env, sample, fenced("while True:\n    pass"))[0])
    assert "Test 1: timed out" in text and "time limit 1 s exceeded" in text
    assert "Input: 3" in text and "Expected: 9" in text


@pytest.mark.parametrize("answer", ["", "   ", "<think>I need to think about this more"])
def test_no_program_ends_the_episode_for_the_judge_to_say_no_answer(copies, answer):
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]))
    sample = samples("livecodebench", copies)["abc001_a"]
    assert extract_code(answer) is None
    (reply,) = play(task.environment, sample, answer)
    assert reply.done and not reply.messages
    assert task.score(sample, answer).status == "no_answer"


def test_the_caps_hold_on_long_outputs_and_the_whole_message(copies):
    task = get_task("livecodebench").with_data(copies["livecodebench"])
    sample = samples("livecodebench", copies)["abc001_a"]
    spam = fenced("print('x' * 50000)")
    env = TestsFeedback(verifier_options=task.verifier_options(), max_shown_chars=100)
    text = feedback_text(play(env, sample, spam)[0])
    # 50,000 x and a newline printed: 100 shown, 49,901 said dropped
    assert "x" * 100 in text and "x" * 101 not in text and "[+49901 chars]" in text
    assert len(text) <= env.max_observation_chars
    small = TestsFeedback(verifier_options=task.verifier_options(), max_observation_chars=200)
    cut = feedback_text(play(small, sample, spam)[0])
    assert len(cut) <= 200 and "feedback cut to 200 characters" in cut


def test_a_row_without_public_tests_ends_after_the_first_answer(copies):
    sample = samples("livecodebench", copies)["abc001_a"]
    tests = {k: v for k, v in sample.tests.items() if k != "public"}
    bare = type(sample)(id=sample.id, task=sample.task, prompt=sample.prompt, tests=tests)
    env = with_feedback(get_task("livecodebench")).environment
    assert play(env, bare, fenced("print(0)"))[0].done  # wrong, but nothing public to run


# --- MBPP, MBPP+, HumanEval(+): the prompt's examples are public ------------------------------
def test_mbpp_public_tests_are_the_prompts_asserts(copies):
    sample = samples("mbpp", copies)["11"]
    public = public_tests(sample.tests)
    assert public["test"] == sample.tests["test"]  # every assert is in the prompt
    wrong = fenced("def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)")  # first only
    text = feedback_text(play(with_feedback(get_task("mbpp")).environment, sample, wrong)[0])
    assert "failed 3 of the 3 public tests" in text
    assert "Test: assert remove_Occ(\"hello\",\"l\") == \"heo\"" in text
    assert "Got: returned 'helo'" in text and "Got: returned 'HP'" in text


def test_asserts_that_run_as_one_check_name_the_failing_line(copies):
    sample = samples("mbpp", copies)["12"]  # set(similar_elements(...)) == ...: not a call test
    wrong = fenced("def similar_elements(a, b):\n    return (4, 5)")  # right on the first only
    text = feedback_text(play(with_feedback(get_task("mbpp")).environment, sample, wrong)[0])
    assert "failed the public tests (they stop at the first failure)" in text
    assert "Test: assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))" in text
    assert "AssertionError" in text


def test_mbpp_plus_shows_only_the_prompts_assert_never_evalplus_inputs(copies):
    by_id = samples("mbpp+", copies)
    sample = next(s for s in by_id.values() if s.meta["entry_point"] == "similar_elements")
    public = public_tests(sample.tests)
    assert public["test"].count("assert ") == 1 and public["test"].split("\n")[1].strip() in (
        sample.prompt)
    wrong = fenced("def similar_elements(a, b):\n    return ()")
    text = feedback_text(play(with_feedback(get_task("mbpp+")).environment, sample, wrong)[0])
    assert "failed 1 of the 1 public test" in text and "Got: returned ()" in text
    assert "inputs" not in text and "results" not in text  # EvalPlus's lists stay private


def test_humaneval_plus_public_tests_are_the_docstring_examples(copies):
    sample = samples("humaneval+", copies)["HumanEval/0"]
    assert docstring_examples(sample.tests["prelude"], "has_close_elements") == [
        "assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False",
        "assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) == True"]
    wrong = fenced("def has_close_elements(numbers, threshold):\n    return True")
    env = with_feedback(get_task("humaneval+")).environment
    text = feedback_text(play(env, sample, wrong)[0])
    assert "failed 1 of the 2 public tests" in text
    assert "has_close_elements([1.0, 2.0, 3.0], 0.5) == False" in text
    assert "Got: returned True" in text
    assert "3.9" not in text and "0.95" not in text  # EvalPlus's inputs stay private


def test_a_float_example_compares_within_a_tolerance():
    # a want over two lines, as doctest reads it; a want runs to the next blank line
    stub = ('def f(x):\n    """\n    >>> f(3.5)\n    0.5\n\n    f(1) ==> 2\n    f(y) ==> 3\n'
            '    >>> f(2)\n    [1,\n     2]\n    """\n')
    assert docstring_examples(stub, "f") == ["assert abs(f(3.5) - 0.5) < 1e-06",
                                             "assert f(1) == 2", "assert f(2) == [1, 2]"]


@pytest.mark.parametrize("name", ["livecodebench", "mbpp", "mbpp+", "humaneval+"])
def test_every_fixture_gold_passes_its_public_tests(name, copies):
    env = with_feedback(get_task(name).with_data(copies[name])).environment
    ran = 0
    for sample in samples(name, copies).values():
        assert play(env, sample, bf.gold_program(sample))[0].done, sample.id
        ran += public_tests(sample.tests) is not None
    assert ran >= 3


def test_humaneval_canonical_solutions_pass_their_docstring_examples():
    _require("bwrap")
    task = get_task("humaneval")
    env = with_feedback(task).environment
    parser, with_public, doctests = doctest.DocTestParser(), 0, 0
    for sample in task.samples("test"):
        entry = sample.tests["entry_point"]
        public = public_tests(sample.tests)
        shown = public["test"] if public else ""
        # every stdlib-doctest example of the entry point is public unless listed as wrong
        for ex in parser.get_examples(sample.tests["prelude"]):
            want = ex.want.replace('"""', "").strip()
            if ex.source.startswith(entry + "(") and want and ex.source.strip() not in (
                    WRONG_EXAMPLES):
                doctests += 1
                assert ex.source.strip() in shown, (sample.id, ex.source)
        if public:
            with_public += 1
            reply = play(env, sample, sample.meta["solution"])[0]
            assert reply.done, (sample.id, reply.messages)
    print(f"humaneval: {with_public}/164 problems with public examples, "
          f"{doctests} doctest examples among them")
    assert with_public >= 120 and doctests >= 150


# --- turning it on: feedback:<task>, with_feedback ----------------------------------------------
def test_feedback_prefix_plays_the_task_under_its_own_name_with_its_data(copies):
    plain = get_task("livecodebench:2024-08..2025-02").with_data(copies["livecodebench"])
    played = get_task("feedback:livecodebench:2024-08..2025-02").with_data(
        copies["livecodebench"])  # `--data feedback:livecodebench:...=PATH`
    assert isinstance(played.environment, TestsFeedback) and plain.environment is None
    assert played.name == "livecodebench:2024-08..2025-02" and played.kind == "code"
    assert played.environment.verifier_options == {"requires_thinking": False,
                                                   "test_timeout_s": 6.0, "compare": "lcb"}
    assert played.samples("test") == plain.samples("test")
    assert played.system_prompt == plain.system_prompt and played.splits == ("test",)
    sample = played.samples("test")[0]
    assert played.score(sample, bf.gold_program(sample)).status == "correct"
    assert played.score(sample, fenced("print(0)")).status == "wrong"
    assert isinstance(played.with_revision("main").environment, TestsFeedback)
    assert get_task("feedback:mbpp").environment.max_turns == 3
    again = with_feedback(played, max_turns=5)  # re-wrapping replaces, never nests
    assert again.inner is played.inner and again.environment.max_turns == 5


def test_feedback_on_a_task_that_is_not_code_is_one_line():
    with pytest.raises(ValueError, match=r"^task 'arith' is of kind 'math': test feedback needs "
                                         r"a `code` task"):
        get_task("feedback:arith")


# --- settings, failures, docker -----------------------------------------------------------------
def test_registered_by_name_and_options_are_checked():
    env = environment_factory("tests_feedback")(max_turns=2, max_observation_chars=500)
    assert isinstance(env, TestsFeedback) and (env.max_turns, env.max_observation_chars) == (
        2, 500)
    with pytest.raises(ValueError, match="max_turns must be an integer >= 1"):
        TestsFeedback(max_turns=0)
    with pytest.raises(ValueError, match="needs a `code` task"):
        with_feedback(get_task("arith"))
    with pytest.raises(TypeError, match=r"EnvContext.grading must be a Grading"):
        TestsFeedback().start(None, EnvContext(grading="bwrap"))


def test_the_tasks_verifier_options_come_from_the_constructor(copies):
    sample = samples("livecodebench", copies)["abc001_a"]
    bare = environment_factory("tests_feedback")(max_turns=2)  # as a spec key builds it
    with pytest.raises(ValueError, match=r"verifier options are unknown; build the environment "
                                         r"with with_feedback\(task\)"):
        bare.start(sample, EnvContext())
    options = get_task("livecodebench").verifier_options()
    given = environment_factory("tests_feedback")(max_turns=2, verifier_options=options)
    state = given.start(sample, EnvContext())
    transcript = [*sample.messages(), {"role": "assistant", "content": fenced("print(8)")}]
    assert "Expected: 9" in feedback_text(given.step(sample, transcript, state))


def test_malformed_public_tests_are_the_rollouts_error():
    sample = bf_sample({"type": "stdio", "inputs": ["1\n"], "outputs": ["1\n"], "public": 5})
    env = TestsFeedback(verifier_options={})
    with pytest.raises(SessionFailed, match="public count 5 exceeds the 1 tests"):
        play(env, sample, fenced("print(1)"))


def test_a_sandbox_that_fails_is_the_rollouts_error(monkeypatch):
    import scalerl.envs.code.verifier as verifier

    class Broken:
        def run(self, *a, **kw):
            raise OSError("bwrap: cannot create namespace")

    monkeypatch.setattr(verifier, "_backend", lambda sandbox: Broken())
    sample = bf_sample({"type": "stdio", "inputs": ["1\n"], "outputs": ["1\n"], "public": 1})
    with pytest.raises(SessionFailed, match="cannot create namespace"):
        play(TestsFeedback(verifier_options={}), sample, fenced("print(2)"))


@pytest.mark.docker
def test_feedback_runs_in_the_runs_sandbox_docker(copies):
    _require("docker")
    task = with_feedback(get_task("livecodebench").with_data(copies["livecodebench"]))
    sample = samples("livecodebench", copies)["abc001_a"]
    grading = Grading(sandbox=SandboxConfig("docker"))
    text = feedback_text(play(task.environment, sample, fenced("print(int(input()) + 1)"),
                              grading=grading)[0])
    assert "Expected: 9" in text and "Got: 4" in text


def bf_sample(tests):
    from scalerl.envs.base import Sample

    return Sample(id="t1", task="user_code", prompt="Print the input.", tests=tests)
