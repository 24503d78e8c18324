"""Data loading (jsonl/json/parquet/csv via `datasets`), hash splits, dedup, FileTask errors."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from scalerl.envs import catalog, kinds
from scalerl.envs.base import Score
from scalerl.envs.data import (
    DataError,
    assign_splits,
    identity_key,
    is_hub_id,
    load_rows,
    normalize_prompt,
    prompt_key,
    split_of,
)
from scalerl.envs.filetask import FileTask
from scalerl.envs.math.files import last_boxed, read_math_gold


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture
def toy_kind(monkeypatch):
    """A kind that checks `completion == answer`, registered for one test only."""
    catalog.task_names()  # load built-ins and plugins before snapshotting
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    seen_options = []

    def score(sample, completion, options, grading):
        seen_options.append(dict(options))
        ok = completion.strip() == sample.answer
        return Score("correct" if ok else "wrong")

    kinds.register_kind(kinds.Kind("toy", score, "answer", "toy system prompt"), replace=True)
    return seen_options


# --- normalisation and the hash split ---------------------------------------------------------
def test_normalize_prompt_applies_nfkc_lowercase_and_collapses_whitespace():
    # Fullwidth W (U+FF37) becomes W under NFKC; tabs/newlines collapse to one space.
    assert normalize_prompt("  \uff37hat  IS\t\n2+2? ") == "what is 2+2?"


def test_prompt_key_is_sha256_of_the_normalised_prompt():
    assert prompt_key(" What  is 2+2?") == hashlib.sha256(b"what is 2+2?").hexdigest()


def test_split_of_follows_the_documented_formula():
    # Independent recomputation: u = first 8 bytes of sha256("seed:key") / 2**64; u < 0.1 -> test.
    for i in range(200):
        key = prompt_key(f"problem {i}")
        u = int.from_bytes(hashlib.sha256(f"3:{key}".encode()).digest()[:8], "big") / 2**64
        expected = "test" if u < 0.1 else ("val" if u < 0.3 else "train")
        assert split_of(key, test_fraction=0.1, val_fraction=0.2, seed=3) == expected


def test_split_fractions_are_close_to_the_requested_ones():
    keys = [prompt_key(f"q{i}") for i in range(10_000)]
    split = assign_splits(keys, test_fraction=0.1, val_fraction=0.05, seed=0)
    # Binomial: sd = sqrt(10000 * 0.1 * 0.9) = 30 for test, ~21.8 for val; allow 4 sd.
    assert abs(len(split.test) - 1000) < 120
    assert abs(len(split.val) - 500) < 88
    assert len(split.train) + len(split.val) + len(split.test) == 10_000


def test_split_is_the_same_on_two_calls_and_changes_with_the_seed():
    keys = [prompt_key(f"q{i}") for i in range(500)]
    a = assign_splits(keys, test_fraction=0.2, seed=1)
    assert a == assign_splits(keys, test_fraction=0.2, seed=1)
    assert a.test != assign_splits(keys, test_fraction=0.2, seed=2).test


def test_split_is_the_same_in_another_process_with_another_hash_seed():
    code = (
        "from scalerl.envs.data import assign_splits, prompt_key\n"
        "keys = [prompt_key(f'q{i}') for i in range(300)]\n"
        "print(list(assign_splits(keys, test_fraction=0.2, val_fraction=0.1, seed=5).test))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    keys = [prompt_key(f"q{i}") for i in range(300)]
    here = assign_splits(keys, test_fraction=0.2, val_fraction=0.1, seed=5)
    assert json.loads(out) == list(here.test)


def test_assign_splits_drops_duplicates_and_heldout_keys():
    keys = ["a", "b", "a", "c", "d"]
    split = assign_splits(keys, test_fraction=0.0, heldout_keys=["c"])
    assert split.train == (0, 1, 4) and split.duplicates == 2


def test_identity_is_the_normalised_prompt_and_its_gold():
    gold_tests = {"type": "assert", "test": "assert f(1) == 2"}
    assert identity_key(" What  is 2+2?", " 4 ") == hashlib.sha256(
        b"what is 2+2?\x004").hexdigest()
    assert identity_key("Q", gold_tests) == hashlib.sha256(
        b'q\x00{"test": "assert f(1) == 2", "type": "assert"}').hexdigest()  # keys sorted
    assert identity_key("Q", "4") != identity_key("Q", "5")


def test_two_golds_of_one_text_are_kept_and_split_together_exact_copies_merged():
    texts = [prompt_key(f"q{i}") for i in range(300)]
    groups = texts + texts[:50] + texts[:10]  # 50 texts again with another gold, 10 exact copies
    keys = [f"{g}:gold-a" for g in texts] + [f"{g}:gold-b" for g in texts[:50]] + [
        f"{g}:gold-a" for g in texts[:10]]
    split = assign_splits(keys, test_fraction=0.3, groups=groups)
    assert split.duplicates == 10 and split.dropped == tuple(range(350, 360))
    where = {i: name for name in ("train", "test") for i in split.get(name)}
    assert len(where) == 350
    assert all(where[300 + i] == where[i] for i in range(50))  # the other gold: same split
    banned = assign_splits(keys, test_fraction=0.0, groups=groups, heldout_keys=texts[:5])
    assert banned.dropped[:7] == (0, 1, 2, 3, 4, 300, 301)  # a held-out text, any gold


def test_bad_fractions_are_rejected_with_their_values():
    with pytest.raises(ValueError, match="test_fraction \\+ val_fraction = 1.2"):
        assign_splits(["a"], test_fraction=0.7, val_fraction=0.5)


# --- loading ------------------------------------------------------------------------------------
ROWS = [{"problem": "1+1", "answer": "2"}, {"problem": "2+3", "answer": "5"}]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "csv"])
def test_load_rows_reads_every_local_format(tmp_path, fmt):
    import pandas as pd

    path = tmp_path / f"d.{fmt}"
    df = pd.DataFrame(ROWS)
    {"jsonl": lambda: df.to_json(path, orient="records", lines=True),
     "json": lambda: path.write_text(json.dumps(ROWS)),
     "parquet": lambda: df.to_parquet(path),
     "csv": lambda: df.to_csv(path, index=False)}[fmt]()
    rows = load_rows(path)
    assert [(r["problem"], str(r["answer"])) for r in rows] == [("1+1", "2"), ("2+3", "5")]


def test_missing_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(DataError, match=r"nope\.jsonl: no such file$"):
        load_rows(tmp_path / "nope.jsonl")


def test_unknown_format_lists_the_known_ones(tmp_path):
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DataError, match=r"unknown data format '.txt'; use one of .jsonl"):
        load_rows(tmp_path / "d.txt")


def test_invalid_json_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2",\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2: invalid JSON") as info:
        load_rows(path)
    assert "\n" not in str(info.value)


def test_hub_ids_are_told_apart_from_files():
    assert is_hub_id("POLARIS-Project/Polaris-Dataset-53K")
    assert is_hub_id("agentica-org/DeepScaleR-Preview-Dataset@train")
    assert not is_hub_id("data/train.jsonl")
    assert not is_hub_id("train")


# --- FileTask ----------------------------------------------------------------------------------
def test_missing_field_names_file_row_field_and_the_fields_that_exist(tmp_path, toy_kind):
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": "a", "answer": "1"}, {"q": "b", "ans": "2"}])
    task = FileTask("t", "toy", data, fields={"prompt": "q"})
    with pytest.raises(DataError) as info:
        task.samples("train")
    msg = str(info.value)
    assert msg == (f"{data}: 1 of 2 rows unusable, more than max_bad_fraction 0.01; row 2: "
                   "field 'answer' is missing (columns: q, ans)")


def test_no_prompt_column_lists_the_columns(tmp_path, toy_kind):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "answer": "1"}])
    with pytest.raises(DataError, match="no prompt field prompt / problem / question; "
                                        "fields in the file: text, answer"):
        FileTask("t", "toy", data).samples("train")


def test_duplicate_of_a_heldout_prompt_never_reaches_train(tmp_path, toy_kind):
    train = [{"problem": f"Problem {i}", "answer": str(i)} for i in range(40)]
    train.append({"problem": "  WHAT is   6*7? ", "answer": "42"})  # same prompt, other spelling
    train.append({"problem": "Problem 3", "answer": "3"})  # duplicate within the file
    heldout = [{"problem": "what is 6*7?", "answer": "42"}, {"problem": "Problem 5", "answer": "5"}]
    task = FileTask("t", "toy", write_jsonl(tmp_path / "train.jsonl", train),
                    test_data=write_jsonl(tmp_path / "test.jsonl", heldout), val_fraction=0.2)
    test_keys = {prompt_key(s.prompt) for s in task.samples("test")}
    other = [prompt_key(s.prompt) for sp in ("train", "val") for s in task.samples(sp)]
    assert len(task.samples("test")) == 2
    assert test_keys.isdisjoint(other)
    assert len(other) == len(set(other)) == 40 - 1  # 42 rows - 2 held out - 1 duplicate
    assert task.duplicates == 3


def test_a_prompt_with_two_answers_is_two_samples_in_one_split_with_distinct_ids(tmp_path,
                                                                                toy_kind):
    rows = [{"problem": f"P{i}", "answer": str(i)} for i in range(60)]
    rows += [{"problem": "p7", "answer": "seven"}, {"problem": "P8", "answer": "8"}]
    task = FileTask("t", "toy", write_jsonl(tmp_path / "d.jsonl", rows), test_fraction=0.3)
    every = {s.id: (split, s) for split in task.splits for s in task.samples(split)}
    assert len(every) == 61 and task.duplicates == 1  # P8 with 8 again: merged
    sevens = [(split, s.answer) for split, s in every.values() if s.prompt.lower() == "p7"]
    assert sorted(a for _, a in sevens) == ["7", "seven"] and len({sp for sp, _ in sevens}) == 1
    key = prompt_key("p7")[:16]
    assert {i for i in every if i.startswith(key)} == {
        f"{key}-{identity_key('P7', '7')[:8]}", f"{key}-{identity_key('p7', 'seven')[:8]}"}


def test_unusable_rows_of_a_file_are_skipped_counted_and_reported_once(tmp_path, toy_kind,
                                                                        caplog):
    rows = [{"problem": f"P{i}", "answer": str(i)} for i in range(200)]
    rows[40]["answer"], rows[90]["problem"] = "", None
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    task = FileTask("t", "toy", data)
    with caplog.at_level("WARNING", logger="scalerl.data"):
        assert sum(len(task.samples(s)) for s in task.splits) == 198
        task.samples("test")
    assert task.skipped.by_reason() == {"field 'answer' is missing": 1,
                                        "field 'problem' is missing": 1}
    assert [r.getMessage() for r in caplog.records] == [
        f"t: {data}: 2 rows skipped (1 field 'answer' is missing; 1 field 'problem' is "
        "missing) of 200 read"]
    assert next(s for s in task.samples("train") + task.samples("test")
                if s.prompt == "P41").meta["row"] == 42  # row numbers stay the file's
    with pytest.raises(DataError, match="2 of 200 rows unusable, more than max_bad_fraction "
                                        "0.005; row 41: field 'answer' is missing"):
        FileTask("t", "toy", data, max_bad_fraction=0.005).samples("train")


def test_hash_split_of_a_file_task_is_the_same_in_another_process(tmp_path, toy_kind):
    data = write_jsonl(tmp_path / "d.jsonl",
                       [{"problem": f"P{i}", "answer": str(i)} for i in range(100)])
    task = FileTask("t", "toy", data, test_fraction=0.3)
    ids = [s.id for s in task.samples("test")]
    code = (
        "from scalerl.envs import kinds\n"
        "from scalerl.envs.filetask import FileTask\n"
        "kinds.register_kind(kinds.Kind('toy', None, 'answer', ''))\n"
        f"print([s.id for s in FileTask('t', 'toy', {data!r}, test_fraction=0.3)"
        ".samples('test')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "99"}, check=True).stdout
    assert eval(out) == ids and 15 <= len(ids) <= 45  # ~30 of 100


def test_file_task_passes_thinking_flag_and_options_to_the_kind(tmp_path, toy_kind):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1", "answer": "2"}])
    task = FileTask("t", "toy", data, test_fraction=0.0, requires_thinking=True,
                    options={"boxed_only": True})
    sample = task.samples("train")[0]
    assert task.score(sample, "2").status == "correct"
    assert toy_kind == [{"requires_thinking": True, "boxed_only": True}]
    assert task.system_prompt == "toy system prompt"


def test_a_kind_that_raises_gives_an_error_score_not_a_wrong_one(tmp_path, monkeypatch):
    catalog.task_names()
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())

    def broken(sample, completion, options, grading):
        raise RuntimeError("checker exploded")

    kinds.register_kind(kinds.Kind("broken", broken, "answer", ""), replace=True)
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1", "answer": "2"}])
    task = FileTask("t", "broken", data, test_fraction=0.0)
    score = task.score(task.samples("train")[0], "2")
    assert score.status == "error" and "checker exploded" in score.detail


# --- the math kind's file formats --------------------------------------------------------------
def test_math_format_answer_is_the_last_boxed_in_the_solution():
    solution = "First \\boxed{1}. So the answer is $\\boxed{\\frac{3}{4}}$."
    assert last_boxed(solution) == "\\frac{3}{4}"
    assert read_math_gold(solution, "solution") == "\\frac{3}{4}"
    assert read_math_gold(12, "answer") == "12"


def test_math_format_solution_without_boxed_is_a_row_error(tmp_path):
    data = write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "a", "solution": "so \\boxed{2}", "level": "Level 1"},
        {"problem": "b", "solution": "the answer is 3", "level": "Level 2"},
    ])
    with pytest.raises(DataError, match=r"math\.jsonl: 1 of 2 rows unusable, more than "
                                        r"max_bad_fraction 0.01; row 2: field 'solution': "
                                        r".*no \\boxed"):
        FileTask("m", "math", data).samples("train")


def test_polaris_deepscaler_and_math_rows_score_with_math_verify(tmp_path):
    polaris = write_jsonl(tmp_path / "p.jsonl", [{"problem": "Half of one?", "answer": "1/2"}])
    math_fmt = write_jsonl(tmp_path / "m.jsonl",
                           [{"problem": "Half of one?", "solution": "It is $\\boxed{\\frac12}$."}])
    for data in (polaris, math_fmt):
        task = FileTask("m", "math", data, test_fraction=0.0)
        sample = task.samples("train")[0]
        assert task.score(sample, "So \\boxed{0.5}").status == "correct"
        assert task.score(sample, "So \\boxed{0.25}").status == "wrong"


def test_hub_id_that_cannot_be_reached_is_one_line(tmp_path):
    code = ("from scalerl.envs.data import DataError, load_rows\n"
            "try:\n    load_rows('nobody-xyz/not-a-dataset@train')\n"
            "except DataError as exc:\n    print(exc)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.startswith("nobody-xyz/not-a-dataset@train: cannot load from the hub (")
    assert out.count("\n") == 1


def test_heldout_file_in_math_format_beside_a_polaris_style_train_file(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl",
                        [{"problem": "What is 3^4?", "answer": "81"},
                         {"problem": "What is 2^5?", "answer": "32"}])
    heldout = write_jsonl(tmp_path / "test.jsonl",
                          [{"problem": "what is 3^4?", "solution": "So $\\boxed{81}$."}])
    task = FileTask("m", "math", train, test_data=heldout,
                    fields={"prompt": "problem", "answer": "answer"})
    assert [s.answer for s in task.samples("test")] == ["81"]
    assert [s.prompt for s in task.samples("train")] == ["What is 2^5?"]
