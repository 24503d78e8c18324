"""The built-in benchmarks and training sets, on small local copies in each hub's own schema.

Samples load with the right prompt, gold and tests; gold solutions score `correct` and wrong ones
`wrong` (code in the real sandbox, math through math-verify); LiveCodeBench keeps only its window
and decodes private tests as the hub stores them, refusing pickled objects; offline with no copy,
the preflight is one line naming the hub id and the `--data` fix.
"""

from __future__ import annotations

import base64
import io
import json
import marshal
import pickle
import zlib

import bench_fixtures as bf
import pytest

from scalerl.envs.bench import BENCHMARKS
from scalerl.envs.bench.code_sets import CALL_FORMAT, DEEPCODER_IMPORTS
from scalerl.envs.bench.evalplus import adapt_plus_test
from scalerl.envs.bench.livecodebench import decode_private, parse_window
from scalerl.envs.bench.math_sets import gsm8k_answer, number_answer
from scalerl.envs.catalog import get_task
from scalerl.envs.code.plan import plan_tests
from scalerl.envs.data import DataError
from scalerl.envs.kinds import UnknownTaskError

WRONG_CODE = "```python\ndef nothing(*a):\n    return 12345\nprint(12345)\n```"


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return bf.write_all(tmp_path_factory.mktemp("bench"))


def local(name, copies):
    return get_task(name).with_data(copies[name.split(":")[0]])


def test_every_builtin_is_in_the_table_and_has_a_fixture():
    assert sorted(BENCHMARKS) == sorted(bf.ROWS)


def test_math_samples_carry_the_gold_as_the_reports_grade_it(copies):
    math500 = local("math500", copies).samples("test")
    assert math500[1].id == "test/prealgebra/2.json" and math500[1].answer == "\\frac{3}{4}"
    assert math500[0].prompt == bf.PLANTED and math500[0].meta["solution_boxed"] == "3"
    assert [s.answer for s in local("aime24", copies).samples("test")] == [
        "49", "24", "243", "33", "999"]
    assert [s.answer for s in local("amc23", copies).samples("test")][:3] == ["2", "5", "10"]
    gsm = local("gsm8k", copies).samples("test")  # read from parquet
    assert [s.answer for s in gsm] == ["72", "10", "1600", "12", "30"]
    assert gsm[0].prompt == bf.GSM8K_LONG
    assert len(local("aime25", copies).samples("test")) == 5  # a save_to_disk directory


def test_training_sets_split_train_and_a_small_held_out_test(copies):
    task = local("deepscaler", copies)
    train, test = task.samples("train"), task.samples("test")
    assert len(train) + len(test) == 5 and task.splits == ("train", "test")
    assert {s.prompt for s in train}.isdisjoint({s.prompt for s in test})


def test_code_samples_carry_their_tests(copies):
    mbpp = local("mbpp", copies).samples("test")
    assert mbpp[0].prompt.endswith('assert remove_Occ("PHP","P") == "H"\n')
    assert mbpp[0].tests["entry_point"] == "remove_Occ"
    literal = plan_tests(mbpp[0].tests, timeout_s=1.0, float_tol=None)
    assert literal.spec["mode"] == "call" and literal.n_tests == 3  # asserts -> call tests
    assert plan_tests(mbpp[1].tests, timeout_s=1.0, float_tol=None).spec["mode"] == "check"
    planned = plan_tests(mbpp[-1].tests, timeout_s=1.0, float_tol=None)  # MBPP 927
    setup = planned.spec
    assert setup["setup"] == bf.MBPP_SETUP_ROW["test_setup_code"] and setup["mode"] == "call"
    frames = io.BytesIO(planned.frames)
    calls = [marshal.load(frames) for _ in range(planned.n_tests)]
    assert [c["refs"] for c in calls] == [[[0, "root"]], [[0, "root1"]], [[0, "root2"]]]
    plus = {s.id: s.tests for s in local("humaneval+", copies).samples("test")}
    assert "import numpy" not in plus["HumanEval/32"]["test"]
    assert "abs(_poly(*inp, candidate(*inp))) <= 0.0001" in plus["HumanEval/32"]["test"]
    assert (plus["HumanEval/0"]["timeout_s"], plus["HumanEval/0"]["run_timeout_s"]) == (4.0, 60.0)


def deepcoder_samples(copies):
    task = local("deepcoder", copies)
    return task, {s.meta["problem"]: s for split in task.splits for s in task.samples(split)}


def test_deepcoder_rows_of_every_config_are_tested_and_prompted_as_they_are_graded(copies):
    _, by_problem = deepcoder_samples(copies)
    rows = {r["problem"]: r for r in bf.DEEPCODER}
    assert set(by_problem) == set(rows)
    samples = [by_problem[r["problem"]] for r in bf.DEEPCODER]
    pi_stdin, pi_sort, pi_mul, taco_mean, taco_prime, taco_anagram, taco_pairs = samples[:7]
    lcb_stdin, lcb_call = samples[7:]
    for sample in samples[:7]:
        assert (sample.tests["compare"], sample.tests["timeout_s"]) == ("taco", 12.0)
    for sample in (lcb_stdin, lcb_call):
        assert (sample.tests["compare"], sample.tests["timeout_s"]) == ("lcb", 6.0)
    assert all(s.tests["prelude"] == DEEPCODER_IMPORTS for s in by_problem.values())
    assert (pi_stdin.tests["type"], taco_mean.tests["type"], lcb_stdin.tests["type"]) == (
        "stdio", "stdio", "stdio")
    # primeintellect function_call rows keep each result wrapped in a list, as TACO does
    assert pi_sort.tests["fn_name"] == "sort_words" and pi_sort.tests["outputs"][0] == [
        ["a", "bb", "ccc"]]
    assert pi_sort.tests["unwrap_outputs"] is True
    assert (taco_anagram.tests["fn_name"], lcb_call.tests["fn_name"]) == ("is_anagram", "maxOf")
    # call-graded rows without starter code are asked for the function, by name
    assert pi_sort.prompt.endswith(CALL_FORMAT.format(fn_name="sort_words"))
    assert taco_anagram.prompt.endswith(CALL_FORMAT.format(fn_name="is_anagram"))
    assert "standard input" in pi_stdin.prompt and "standard input" in taco_mean.prompt
    assert "class Solution:\n    def maxOf" in lcb_call.prompt
    # PrimeIntellect's solutions come fenced: not fenced again; TACO's are fenced once
    assert pi_stdin.meta["solution"] == rows[pi_stdin.meta["problem"]]["solutions"][0]
    assert taco_mean.meta["solution"].count("```") == 2


def gold_and_wrong(name, sample):
    if BENCHMARKS[name.split(":")[0]].kind == "math":
        return f"So the answer is \\boxed{{{sample.answer}}}.", "\\boxed{-98765}"
    return bf.gold_program(sample), WRONG_CODE


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_gold_solutions_score_correct_and_a_wrong_one_wrong(name, copies):
    task = local(name if name != "livecodebench" else "livecodebench:2024-08..2025-02", copies)
    samples = [s for split in task.splits for s in task.samples(split)]
    assert samples
    for sample in samples:
        gold, wrong = gold_and_wrong(name, sample)
        got = task.score(sample, gold)
        assert got.status == "correct", (sample.id, got.detail)
        assert task.score(sample, wrong).status == "wrong", sample.id


@pytest.mark.parametrize("name", ["livecodebench", "deepcoder"])
def test_near_misses_are_never_correct(name, copies):
    """Off by one on big numbers, a float where an integer is due, a float rounded, wrong order,
    wrong case, one line for several: each fails at least one test (in the real sandbox)."""
    task = local(name, copies)
    samples = [s for split in task.splits for s in task.samples(split)]
    tried = 0
    for sample in samples:
        for program in bf.near_misses(sample):
            got = task.score(sample, f"```python\n{program}\n```")
            assert got.status == "wrong", (sample.id, program, got.detail)
            tried += 1
    assert tried >= 15


def test_livecodebench_window_keeps_only_problems_released_inside_it(copies):
    ids = [s.id for s in local("livecodebench:2024-08..2025-02", copies).samples("test")]
    # 2024-07-30 and 2025-03-02 are cut, and so is 2025-02-28T09:30: the end is 2025-02-28
    # 00:00, as LiveCodeBench compares --end_date 2025-02-28 with full timestamps
    assert ids == ["abc001_a", "abc002_b", "abc003_c", "abc004_d", "3001", "3002"]
    deepcoder_test = local("livecodebench:2024-08-01..2025-02-01", copies).samples("test")
    assert [s.id for s in deepcoder_test] == ["abc001_a", "abc002_b", "abc003_c", "abc004_d",
                                              "3002"]  # 2025-02-01T00:00 is in, as in LCB
    assert [s.id for s in local("livecodebench:2025-01-05..", copies).samples("test")] == [
        "abc004_d", "3001", "3002", "abc999_z", "abc998_y"]
    every = local("livecodebench", copies).samples("test")
    first = every[0]
    assert (first.meta["public_tests"], first.meta["private_tests"]) == (1, 3)
    assert first.tests["inputs"] == ["3\n", "12\n", "0\n", "999999999\n"]  # public, private
    assert first.tests["prelude"].startswith("from string import *")
    assert first.meta["contest_date"] == "2024-09-01T00:00:00"


def test_livecodebench_compares_numbers_by_value_as_its_harness_does(copies):
    task = local("livecodebench:2024-12..2024-12", copies)
    (sample,) = task.samples("test")  # A / B; expected 0.5, 2.0 and 3
    assert task.score(sample, "```python\nprint(3.0)\n```").status == "wrong"
    ok = "```python\na, b = map(int, input().split())\nprint(a / b)\n```"
    assert task.score(sample, ok).status == "correct"  # prints 3.0 where 3 is expected
    rounded = "```python\na, b = map(int, input().split())\nprint(a // b)\n```"
    assert task.score(sample, rounded).status == "wrong"  # 0 is not 0.5


def test_private_tests_decode_from_base64_zlib_pickle_and_plain_json():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_private(bf.encode_private(tests)) == tests
    assert decode_private(json.dumps(tests)) == tests


class Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_a_pickled_object_in_private_tests_is_refused(capsys):
    blob = base64.b64encode(zlib.compress(pickle.dumps([Payload()]))).decode()
    with pytest.raises(ValueError, match="refusing to load builtins.print"):
        decode_private(blob)
    assert "never run" not in capsys.readouterr().out
    bomb = base64.b64encode(zlib.compress(pickle.dumps({1, 2}))).decode()
    with pytest.raises(ValueError, match="must decode to a list"):
        decode_private(bomb)


@pytest.mark.parametrize("text, message", [
    ("2024-13..2025-01", "livecodebench window '2024-13..2025-01': month must be in 1..12"),
    ("2024-08", "livecodebench window '2024-08': expected A..B"),
    ("2025-02..2024-08", "window starts 2025-02-01 after it ends 2024-08-31"),
])
def test_a_bad_window_is_one_line(text, message):
    with pytest.raises(UnknownTaskError, match=message):
        get_task(f"livecodebench:{text}")
    window = parse_window("2024-08..2025-02")
    assert (window.start.isoformat(), window.end.isoformat()) == ("2024-08-01T00:00:00",
                                                                  "2025-02-28T00:00:00")


def test_offline_without_cache_or_copy_preflight_names_the_hub_id_and_data(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(var, raising=False)
    problem = get_task("math500").preflight()
    pin = BENCHMARKS["math500"].source.revision
    assert problem == (f"hub dataset HuggingFaceH4/MATH-500 at {pin} is not in the Hugging Face "
                       "cache and HF_HUB_OFFLINE is set; give a local copy with --data "
                       "math500=PATH (a jsonl/json/parquet file or a save_to_disk directory in "
                       "the hub's schema)")
    snapshots = tmp_path / "hub" / "datasets--HuggingFaceH4--MATH-500" / "snapshots"
    (snapshots / ("0" * 40)).mkdir(parents=True)  # another commit is not the pinned one
    assert get_task("math500").preflight() == (
        f"hub dataset HuggingFaceH4/MATH-500 at {pin} is not in the Hugging Face cache (it holds "
        f"{'0' * 40}; --revision math500=REV reads one) and HF_HUB_OFFLINE is set; give a local "
        "copy with --data math500=PATH (a jsonl/json/parquet file or a save_to_disk directory "
        "in the hub's schema)")
    assert get_task("math500").with_revision("0" * 40).preflight() is None
    (snapshots / pin).mkdir()
    assert get_task("math500").preflight() is None  # the pinned commit cached is enough
    missing = get_task("gsm8k").with_data(str(tmp_path / "nope.jsonl")).preflight()
    assert missing == f"local copy {tmp_path / 'nope.jsonl'}: no such file or directory"


def test_a_row_without_a_needed_column_is_one_line_naming_row_and_columns(tmp_path):
    path = bf.write_jsonl(tmp_path / "g.jsonl", [bf.GSM8K[0], {"question": "Q?", "answr": "1"}])
    with pytest.raises(DataError) as err:
        get_task("gsm8k").with_data(str(path)).samples("test")
    assert str(err.value) == (f"gsm8k: {path}: 1 of 2 rows unusable, more than max_bad_fraction "
                              "0.01; row 2: no non-empty text in column answer (columns: "
                              "question, answr)")


def test_answer_readers():
    assert gsm8k_answer("so\n#### 1,600") == "1600"
    assert (number_answer(142.0), number_answer("033"), number_answer("3/4")) == (
        "142", "33", "3/4")


def test_evalplus_tests_using_numpy_beyond_the_helpers_are_refused():
    with pytest.raises(ValueError, match="uses numpy beyond its assertion helpers"):
        adapt_plus_test(bf.EVALPLUS_HEADER + "x = np.zeros(3)\n", "f")


def test_the_docs_tables_name_every_builtin_with_its_hub_id_and_size():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    page = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for bench in BENCHMARKS.values():
        assert f"`{bench.source.repo}`" in page and bench.source.repo in readme, bench.name
        assert f"| `{bench.source.revision}` |" in page, (bench.name, "its pinned revision")
        assert f"`{bench.name}`" in page, bench.name
        if bench.size_exact:
            assert f"({bench.size:,})" in page, (bench.name, bench.size)
