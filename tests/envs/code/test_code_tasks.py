"""Code tasks: APPS / DeepCoder / LiveCodeBench rows read into verifier tests, `code` file tasks
scored end to end, and `synth_code` (short prompts, seeded, fixed held-out set, warm-start
solutions that score correct). Sandbox runs use bwrap; in CI a missing bwrap fails."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.code.files import read_code_tests
from scalerl.envs.code.tasks import SYNTH_LEVELS, SynthCodeTask, synth_sample
from scalerl.envs.data import DataError
from scalerl.envs.filetask import FileTask
from scalerl.envs.registry import UnknownTaskError
from scalerl.sandbox import available_backends

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def bwrap():
    ok, why = available_backends()["bwrap"]
    if not ok:
        if IN_CI:
            pytest.fail(f"bwrap unavailable in CI: {why}")
        pytest.skip(f"bwrap unavailable: {why}")


# --- readers ------------------------------------------------------------------------------------
def test_apps_stdio_from_a_json_string():
    raw = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert read_code_tests(raw, "input_output") == {
        "type": "stdio", "inputs": ["1 2\n"], "outputs": ["3\n"]}


def test_apps_fn_name_becomes_call_tests_with_unwrapped_outputs():
    raw = {"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]}
    assert read_code_tests(raw, "input_output") == {
        "type": "call", "fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]],
        "unwrap_outputs": True}


def test_livecodebench_stdin_and_functional_lists():
    stdin = [{"input": "5\n", "output": "25\n", "testtype": "stdin"}]
    assert read_code_tests(json.dumps(stdin), "public_test_cases") == {
        "type": "stdio", "inputs": ["5\n"], "outputs": ["25\n"]}
    functional = [{"input": "[1, 2, 3]\n4", "output": "[5, 6, 7]", "testtype": "functional",
                   "metadata": {"func_name": "addAll"}}]
    assert read_code_tests(functional, "tests") == {
        "type": "call", "fn_name": "addAll", "inputs": [[[1, 2, 3], 4]], "outputs": [[5, 6, 7]]}


def test_deepcoder_primeintellect_stdin_stdout_list():
    rows = [{"type": "stdin_stdout", "input": "1\n", "output": "2\n"},
            {"type": "stdin_stdout", "input": "2\n", "output": "4\n"}]
    assert read_code_tests(rows, "tests")["inputs"] == ["1\n", "2\n"]


def test_verifier_format_passes_through():
    tests = {"type": "assert", "entry_point": "f", "test": "def check(c):\n    assert c() == 1\n"}
    assert read_code_tests(json.dumps(tests), "tests") == tests


@pytest.mark.parametrize("raw, message", [
    ("{not json", "not JSON"),
    ({"inputs": ["1"], "outputs": []}, "must be non-empty lists|1 inputs but 0 outputs"),
    ([{"input": "1", "output": "1", "testtype": "stdin"},
      {"input": "1", "output": "1", "testtype": "functional"}], "mixed or unknown test types"),
    ([{"input": "1", "output": "1", "testtype": "functional"}], "need one function name"),
    ([{"input": "1", "testtype": "stdin"}], "a test has no 'output'"),
    (42, "expected {inputs, outputs"),
])
def test_bad_rows_say_what_is_wrong(raw, message):
    with pytest.raises(ValueError, match=message):
        read_code_tests(raw, "tests")


# --- code file tasks ------------------------------------------------------------------------------
def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_apps_file_task_scores_end_to_end(tmp_path, bwrap):
    rows = [{"question": f"Print {k} times the number read.", "input_output": json.dumps(
        {"inputs": [f"{n}\n" for n in range(1, 4)], "outputs": [f"{k * n}\n" for n in range(1, 4)]}
    )} for k in range(2, 12)]
    task = FileTask("apps_tiny", "code", _write_jsonl(tmp_path / "apps.jsonl", rows),
                          test_fraction=0.3)
    samples = task.samples("train") + task.samples("test")
    assert len(samples) == 10 and all(s.tests["type"] == "stdio" for s in samples)
    sample = samples[0]
    k = int(sample.prompt.split()[1])
    good = f"```python\nprint({k} * int(input()))\n```"
    assert task.score(sample, good).correct
    assert task.score(sample, "```python\nprint(int(input()))\n```").status == "wrong"


def test_livecodebench_functional_file_task(tmp_path, bwrap):
    tests = [{"input": "[3, 1, 2]", "output": "[1, 2, 3]", "testtype": "functional",
              "metadata": {"func_name": "sortIt"}}]
    rows = [{"question_content": "Sort the list.", "public_test_cases": json.dumps(tests)}]
    task = FileTask("lcb_tiny", "code", _write_jsonl(tmp_path / "lcb.jsonl", rows),
                          fields={"prompt": "question_content"}, test_fraction=0.0)
    (sample,) = task.samples("train")
    code = "```python\nclass Solution:\n    def sortIt(self, xs):\n        return sorted(xs)\n```"
    assert task.score(sample, code).correct


def test_a_malformed_row_names_the_row(tmp_path):
    rows = [{"question": "q", "input_output": "{broken"}]
    task = FileTask("bad", "code", _write_jsonl(tmp_path / "bad.jsonl", rows))
    with pytest.raises(DataError, match="row 1: field 'input_output': not JSON"):
        task.samples("train")


# --- synth_code ---------------------------------------------------------------------------------
def test_synth_sample_by_hand():
    s = synth_sample("t", "linear", SYNTH_LEVELS["linear"][0], {"a": 3, "b": 2})
    assert s.prompt == "f(x)=3x+2"
    assert s.meta["solution"] == "<think>3*x+2</think>\n```python\ndef f(x):\n    return 3*x+2\n```"
    xs = [args[0] for args in s.tests["inputs"]]
    assert len(set(xs)) == 5 and all(-9 <= x <= 9 for x in xs)
    assert s.tests["outputs"] == [3 * x + 2 for x in xs]


def test_synth_conditional_and_modulo_outputs_by_hand():
    cond = synth_sample("t", "conditional", SYNTH_LEVELS["conditional"][0], {"a": 2})
    assert cond.prompt == "f(x)=|x-2|"
    xs = [a[0] for a in cond.tests["inputs"]]
    assert cond.tests["outputs"] == [abs(x - 2) for x in xs]
    mod = synth_sample("t", "modulo", SYNTH_LEVELS["modulo"][0], {"a": 3, "b": 1, "m": 5})
    assert mod.prompt == "f(x)=(3x+1) mod 5"
    assert mod.tests["outputs"] == [(3 * a[0] + 1) % 5 for a in mod.tests["inputs"]]


def test_synth_prompts_are_short_and_splits_disjoint_and_seeded():
    a, b = SynthCodeTask(seed=0), SynthCodeTask(seed=1)
    train, test = a.samples("train"), a.samples("test")
    assert max(len(s.prompt) for s in train + test) <= 24
    assert {s.prompt for s in train}.isdisjoint({s.prompt for s in test})
    assert [s.id for s in test] == [s.id for s in b.samples("test")]  # test never moves
    assert [s.id for s in train] != [s.id for s in b.samples("train")]
    assert [s.id for s in train] == [s.id for s in SynthCodeTask(seed=0).samples("train")]
    assert {s.meta["level"] for s in test} == set(SYNTH_LEVELS)
    assert all(len(set(s.tests["outputs"])) > 1 for s in train + test)  # no constant answers


def test_synth_warm_start_solutions_score_correct(bwrap):
    task = get_task("synth_code")
    assert task.requires_thinking and task.kind == "code"
    samples = task.samples("test")[::5]
    with ThreadPoolExecutor(4) as ex:
        scores = list(ex.map(task.score, samples, [s.meta["solution"] for s in samples]))
    assert [s.status for s in scores] == ["correct"] * len(samples)


def test_synth_requires_thinking_and_rejects_a_wrong_function(bwrap):
    task = get_task("synth_code")
    sample = task.samples("test")[0]
    no_think = sample.meta["solution"].split("</think>", 1)[1]
    assert task.score(sample, no_think).status == "no_answer"
    wrong = "<think>x</think>\n```python\ndef f(x):\n    return x\n```"
    assert task.score(sample, wrong).status == "wrong"


def test_synth_levels_by_prefix_and_unknown_level():
    task = get_task("synth_code:linear,modulo")
    assert {s.meta["level"] for s in task.samples("test")} == {"linear", "modulo"}
    with pytest.raises(UnknownTaskError, match="unknown synth_code level cubic; levels: linear"):
        SynthCodeTask(levels=("cubic",))


def test_a_yaml_spec_makes_a_code_task_with_options(tmp_path, bwrap):
    from scalerl.envs.spec import read_spec, task_from_entry

    tests = {"inputs": ["2\n", "3\n"], "outputs": ["0.5\n", "0.333333333\n"]}
    _write_jsonl(tmp_path / "inv.jsonl", [{"problem": "Print 1/n.", "input_output": tests}])
    (tmp_path / "spec.yaml").write_text(
        "name: inverse\nkind: code\ndata: inv.jsonl\ntest_fraction: 0\n"
        "options: {float_outputs: true, test_timeout_s: 2}\n")
    (entry,) = read_spec(tmp_path / "spec.yaml")
    task = task_from_entry(entry)
    (sample,) = task.samples("train")
    assert task.score(sample, "```python\nprint(round(1 / int(input()), 7))\n```").correct
    assert task.score(sample, "```python\nprint(round(1 / int(input()), 2))\n```").status == "wrong"
