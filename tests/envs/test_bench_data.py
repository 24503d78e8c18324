"""Where a built-in's rows come from and which rows it keeps: the pinned hub revision (offline:
the hub cache's snapshot of that very commit, written here in the real cache layout), unusable
rows skipped and counted, and dedup on problem and gold (two golds of one text are two problems,
split together)."""

from __future__ import annotations

import json
import logging
import re

import bench_fixtures as bf
import hub_cache
import pytest

from scalerl.envs.bench import BENCHMARKS
from scalerl.envs.catalog import get_task
from scalerl.envs.data import DataError, prompt_key

SHA = re.compile(r"^[0-9a-f]{40}$")
OTHER = "1" * 40


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty Hugging Face home, offline: what a test writes under `hub` is all there is."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "hf" / "hub"


def test_every_hub_dataset_is_pinned_to_a_commit():
    for name, bench in BENCHMARKS.items():
        assert SHA.match(bench.source.revision or ""), name
        task = get_task(name)
        assert task.revision == bench.source.revision and bench.source.revision in task.source


def test_offline_the_pinned_commit_is_read_from_the_cache_and_another_only_when_asked(
        offline_cache):
    pin = BENCHMARKS["math500"].source.revision
    newer = [dict(r, answer="999") for r in bf.MATH500]  # what a later hub commit could hold
    hub_cache.write_snapshot(offline_cache, "HuggingFaceH4/MATH-500", OTHER,
                             {"test.jsonl": newer}, ref="main")
    assert "at " + pin in get_task("math500").preflight()  # main is cached, the pin is not
    hub_cache.write_snapshot(offline_cache, "HuggingFaceH4/MATH-500", pin,
                             {"test.jsonl": bf.MATH500})
    assert get_task("math500").preflight() is None
    assert [s.answer for s in get_task("math500").samples("test")] == [
        r["answer"] for r in bf.MATH500]
    for rev in (OTHER, "main"):  # by commit, or by the branch the cache's refs/main names
        moved = get_task("math500").with_revision(rev)
        assert moved.revision == rev and {s.answer for s in moved.samples("test")} == {"999"}


def test_offline_a_config_of_the_pinned_snapshot_loads_as_the_hub_card_lays_it_out(
        offline_cache):
    pin = BENCHMARKS["mbpp"].source.revision
    other = [dict(bf.MBPP[0], task_id=600 + i) for i in range(2)]
    files = {"README.md": hub_cache.MBPP_README, "full/test-00000-of-00001.parquet": bf.MBPP}
    for split in ("train", "validation", "prompt"):
        files[f"full/{split}-00000-of-00001.parquet"] = other
    hub_cache.write_snapshot(offline_cache, "google-research-datasets/mbpp", pin, files)
    assert [s.id for s in get_task("mbpp").samples("test")] == [str(r["task_id"])
                                                               for r in bf.MBPP]


def test_offline_release_files_are_read_at_the_pinned_commit(offline_cache):
    pin = BENCHMARKS["livecodebench"].source.revision
    names = BENCHMARKS["livecodebench"].source.files
    files = {f: (bf.LIVECODEBENCH if f == names[0] else []) for f in names}
    files = {f: rows if rows else "" for f, rows in files.items()}  # later releases: empty
    hub_cache.write_snapshot(offline_cache, "livecodebench/code_generation_lite", pin, files)
    ids = [s.id for s in get_task("livecodebench:2024-08..2025-02").samples("test")]
    # in the window (its end is 2025-02-28 00:00, as LiveCodeBench compares timestamps)
    assert ids == ["abc001_a", "abc002_b", "abc003_c", "abc004_d", "3001", "3002"]
    with pytest.raises(DataError, match=f"cannot load hub dataset livecodebench/"
                                        f"code_generation_lite .* at {OTHER} "):
        get_task("livecodebench").with_revision(OTHER).samples("test")


def test_online_the_revision_reaches_the_real_loaders(monkeypatch):
    """The hub cannot be reached here: record what the two loader functions are called with."""
    import datasets
    import huggingface_hub

    from scalerl.envs.bench import hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", "/prepared")  # datasets' cache, read at each call
    calls = []

    class Rows:
        def to_list(self):
            return []

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **kw: calls.append((a, kw)) or Rows())
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda *a, **kw: calls.append((a, kw)) or "/dev/null")
    hub.read_parts(BENCHMARKS["deepcoder"].source)
    pin = BENCHMARKS["deepcoder"].source.revision
    assert calls == [(("agentica-org/DeepCoder-Preview-Dataset", c),
                      {"split": "train", "cache_dir": "/prepared", "revision": pin})
                     for c in ("primeintellect", "taco", "lcbv5")]
    calls.clear()
    hub.read_files(BENCHMARKS["livecodebench"].source.at("main"))
    assert calls[0][0] == ("livecodebench/code_generation_lite", "test.jsonl")
    assert calls[0][1]["revision"] == "main" and "local_files_only" not in calls[0][1]


def test_a_training_set_with_answerless_rows_loads_them_skipped_counted_and_reported_once(
        tmp_path, caplog):
    path = bf.write_jsonl(tmp_path / "ds.jsonl", bf.deepscaler_rows(300, answerless=3))
    task = get_task("deepscaler").with_data(str(path))
    with caplog.at_level(logging.WARNING, logger="scalerl.data"):
        kept = len(task.samples("train")) + len(task.samples("test"))
        get_task("deepscaler").with_data(str(path))  # the same copy: loaded once per process
    assert kept == 297 and task.skipped.count == 3 and task.skipped.rows == 300
    assert [r.getMessage() for r in caplog.records] == [
        f"deepscaler: {path}: 3 rows skipped (2 no answer: `answer` empty, no `solution`; 1 "
        "no answer: `answer` empty, no \\boxed{} in `solution`) of 300 read"]
    path = bf.write_jsonl(tmp_path / "bad.jsonl", bf.deepscaler_rows(100, answerless=2))
    with pytest.raises(DataError, match=r"^deepscaler: .*bad\.jsonl: 2 of 100 rows unusable, "
                                        r"more than max_bad_fraction 0.01; row 33: no "
                                        r"answer: `answer` empty, no `solution` \(columns: "
                                        r"problem, answer, solution\)$"):
        get_task("deepscaler").with_data(str(path)).samples("train")


def mbpp_pair():
    """Two MBPP rows with one text and different tests (MBPP has such a pair), and an exact
    copy of the first."""
    text = "Write a function to find the minimum of two numbers."
    first = {"task_id": 404, "text": text, "code": "def minimum(a,b):\n    return min(a, b)",
             "test_list": ["assert minimum(1,2) == 1", "assert minimum(-5,-4) == -5"],
             "test_setup_code": "", "challenge_test_list": []}
    second = {"task_id": 405, "text": text, "code": "def min_of_two(x, y):\n    return min(x, y)",
              "test_list": ["assert min_of_two(10,20)==10", "assert min_of_two(19,15)==15"],
              "test_setup_code": "", "challenge_test_list": []}
    return [first, second, dict(first)]


def test_one_text_with_two_test_lists_is_two_problems_an_exact_copy_is_merged(tmp_path):
    task = get_task("mbpp").with_data(str(bf.write_jsonl(tmp_path / "m.jsonl", mbpp_pair())))
    samples = task.samples("test")
    assert [s.id for s in samples] == ["404", "405"] and task.duplicates == 1
    for sample in samples:
        gold = task.score(sample, sample.meta["solution"])
        assert gold.status == "correct", gold.detail
    other = task.score(samples[1], samples[0].meta["solution"])
    assert other.status != "correct"  # the first problem's function does not pass the second


def test_deepcoder_rows_sharing_a_text_keep_both_sets_of_tests_in_one_split(tmp_path):
    text = "Read an integer n and print n + 1."
    rows = [dict(bf.DEEPCODER[0], problem=text,
                 tests=json.dumps([{"type": "stdin_stdout", "input": f"{k}\n",
                                    "output": f"{k + 1}\n"}]))
            for k in (1, 7)] + bf.DEEPCODER[1:]
    task = get_task("deepcoder").with_data(str(bf.write_jsonl(tmp_path / "dc.jsonl", rows)))
    by_split = {split: [s for s in task.samples(split) if s.meta["problem"] == text]
                for split in task.splits}
    twins = [s for group in by_split.values() for s in group]
    assert len(twins) == 2 and sum(bool(g) for g in by_split.values()) == 1
    key = prompt_key(text)[:16]
    assert {s.id.rsplit("-", 1)[0] for s in twins} == {key} and len({s.id for s in twins}) == 2
    assert sorted(s.tests["inputs"][0] for s in twins) == ["1\n", "7\n"]
    ok = "```python\nprint(int(input()) + 1)\n```"
    assert all(task.score(s, ok).status == "correct" for s in twins)
