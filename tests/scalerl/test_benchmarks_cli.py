"""Benchmarks through the commands: protocols, `--data`, contamination, offline preflight.

The fast tests build evaluation plans (no engine) and check the settings each protocol gives,
the contamination counts of a planted overlap, the start-up warning of a training run and the
one-line errors; the slow one runs `scalerl eval --protocol r1` end to end on the session's
engine (tiny model, CPU) over four benchmarks' local copies.
"""

from __future__ import annotations

import json

import bench_fixtures as bf
import pytest

from scalerl import cli
from scalerl.cli import build_parser
from scalerl.commands.eval import prepare
from scalerl.config import load_config
from scalerl.envs.base import Sample
from scalerl.evaluation.contamination import overlap
from scalerl.rollout.types import Budget


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return bf.write_all(tmp_path_factory.mktemp("bench"))


@pytest.fixture
def model(tmp_path) -> str:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    return str(path)


def data_flags(copies, *names):
    return [f for n in names for f in ("--data", f"{n}={copies[n]}")]


def plan_of(argv):
    return prepare(build_parser("eval").parse_args(["eval", *argv]))


def test_r1_protocol_samples_64_everywhere_at_t06_top_p_095(copies, model, tmp_path):
    argv = ["--model", model, "--tasks", "aime24,math500,livecodebench", "--protocol", "r1",
            "--out", str(tmp_path / "o"),
            *data_flags(copies, "aime24", "math500", "livecodebench")]
    plan = plan_of(argv)
    s = plan.settings
    assert (s.protocol, s.temperature, s.top_p, s.ks) == ("r1", 0.6, 0.95, (1,))
    assert [s.n_for(t) for t in s.tasks] == [64, 64, 64] and s.prompt == "r1"
    assert [plan_of([*argv, "--n", "8"]).settings.n_for(t) for t in s.tasks] == [8, 8, 8]
    # 32768 generated tokens do not fit a 32768-token context: cut to leave 4096 for the prompt
    assert s.budget_for("math500") == Budget(answer=28672)
    assert s.notes[0].startswith("aime24: the protocol's 32768 tokens do not fit max_model_len")
    assert plan.train_tasks == {} and set(plan.tasks) == {"aime24", "math500", "livecodebench"}


def test_greedy_and_flags_over_a_protocol(copies, model, tmp_path):
    base = ["--model", model, "--tasks", "gsm8k", "--out", str(tmp_path / "o"),
            *data_flags(copies, "gsm8k"), "--max-model-len", "2048"]
    greedy = plan_of([*base, "--protocol", "greedy"]).settings
    assert (greedy.n_for("gsm8k"), greedy.temperature, greedy.top_p) == (1, 0.0, 1.0)
    assert greedy.budget_for("gsm8k") == Budget(answer=1536)  # 2048 - 2048 // 4
    custom = plan_of([*base, "--protocol", "r1", "--n", "2", "--top-p", "0.5",
                      "--answer-budget", "64"]).settings
    assert (custom.n_for("gsm8k"), custom.top_p, custom.temperature) == (2, 0.5, 0.6)
    assert custom.budget_for("gsm8k") == Budget(answer=64) and custom.notes == ()
    bare = plan_of(base).settings  # a bare model without --protocol: the old defaults
    assert (bare.protocol, bare.n, bare.temperature, bare.ks) == ("default", 8, 1.0, (1, 4, 8))


def test_a_run_dir_defaults_to_its_own_protocol_and_training_tasks(copies, tmp_path):
    import yaml

    from scalerl.config import to_dict

    cfg = load_config("tiny-cpu", ["val.n=3", "val.temperature=0.5"])
    run = tmp_path / "run"
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    (run / "checkpoints" / "step-1" / "config.json").write_text("{}")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    plan = plan_of(["--model", str(run), "--out", str(tmp_path / "o")])
    s = plan.settings
    assert (s.protocol, s.n, s.temperature) == ("run", 3, 0.5)
    assert s.budget_for("arith") == Budget(thinking=48, answer=16)
    assert set(plan.train_tasks) == {"arith", "synth_code"}


def test_overlap_counts_same_prompts_and_shared_13_word_runs():
    def s(i, text):
        return Sample(id=str(i), task="t", prompt=text, answer="1")

    long = "one two three four five six seven eight nine ten eleven twelve thirteen"
    bench = [s(0, "What is 2+2?"), s(1, f"Count: {long} now."), s(2, "What is 3+3?"),
             s(3, "A short one.")]
    train = [s(9, "what   is 2+2?"),  # same after normalisation (case, spaces)
             s(8, f"Prefix words, then {long} and more."),  # shares the 13-word run only
             s(7, "twelve thirteen now")]  # a short tail shares no 13-word run
    found = overlap(bench, train)
    assert (found.problems, found.exact, found.ngram, found.contaminated) == (4, 1, 1, 2)
    assert found.examples == ("0", "1")


def test_tasks_list_shows_hub_ids_and_card_sizes_and_show_reads_a_copy(copies, capsys):
    assert cli.main(["tasks", "list", "--json", *data_flags(copies, "mbpp")]) == 0
    rows = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["math500"]["splits"] == {"test": 500} and rows["math500"]["declared"]
    pin = "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be"
    assert rows["math500"]["source"] == f"hub HuggingFaceH4/MATH-500 (test) at {pin}"
    assert rows["math500"]["revision"] == pin and "revision" not in rows["mbpp"]
    assert rows["deepcoder"]["splits"] == {"train": 24287}
    assert rows["gsm8k"]["grading"] == "the number after `#### ` in `answer`, math-verify"
    assert rows["mbpp"]["splits"] == {"test": 6} and "declared" not in rows["mbpp"]
    family = rows["livecodebench:<name>"]["source"]
    assert family.endswith("(hub livecodebench/code_generation_lite)")
    # 2025-02-20 is in; 2025-02-28T09:30 is not: the end is 2025-02-28 00:00, as in LCB
    assert cli.main(["tasks", "show", "livecodebench:2025-02-02..2025-02", "-n", "1",
                     *data_flags(copies, "livecodebench")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("livecodebench:2025-02-02..2025-02 (code), split test: 1 sample")
    assert "class Solution:\n    def sumOf(self, nums: List[int]) -> int:" in out


def test_tasks_overlap_prints_the_planted_overlap(copies, capsys):
    argv = ["tasks", "overlap", "math500", "polaris", *data_flags(copies, "math500", "polaris")]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip() == (
        "math500 in polaris: 1 of 5 problems (1 same prompt, 1 sharing a 13-word run); "
        "e.g. test/nt/1.json")
    assert cli.main(["tasks", "overlap", "gsm8k", "polaris", "--json",
                     *data_flags(copies, "gsm8k", "polaris")]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["exact"], row["ngram13"], row["examples"]) == (0, 1, ["1cfeb3aa3aa8986d"])


def test_a_training_run_holding_benchmark_problems_warns_at_start_up(copies):
    from scalerl.commands.train import with_sources
    from scalerl.local_data import Sources
    from scalerl.training import contamination_warnings

    cfg = load_config("scalerl", ["tasks=[{name: polaris}]"])
    given = Sources({n: copies[n] for n in ("polaris", "math500", "gsm8k")})
    cfg, extra = with_sources(cfg, given, resume=False)
    assert cfg.tasks[0].data == copies["polaris"] and set(extra.data) == {"math500", "gsm8k"}
    lines = contamination_warnings(cfg, extra)
    assert lines == [
        "warning: training task polaris holds 1 of math500's 5 problems (1 same prompt, 1 "
        "sharing a 13-word run; e.g. test/nt/1.json)",
        "warning: training task polaris holds 1 of gsm8k's 5 problems (0 same prompt, 1 sharing "
        "a 13-word run; e.g. 1cfeb3aa3aa8986d)"]


@pytest.mark.parametrize("argv, message", [
    (["--data", "nothing=x.jsonl"], "scalerl train: --data nothing: no task 'nothing'; known "
     "tasks: aime24, aime25, amc23, arith, "),
    (["--revision", "nothing=main"], "scalerl train: --revision nothing: no task 'nothing'"),
    (["--revision", "arith=main"], "tasks[0].revision: task 'arith' is not read from the hub"),
    (["--data", "math500=m.jsonl", "--revision", "math500=main"],
     "--data math500 and --revision math500: a local copy has no hub revision"),
    (["--data", "arith=x.jsonl"], "tasks[0].data: task 'arith' reads no data file"),
    (["--data", "arith"], "--data 'arith': expected NAME=PATH"),
])
def test_bad_train_data_flags_are_one_line(argv, message, capsys, tmp_path):
    assert cli.main(["train", "--run-dir", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_eval_offline_without_copy_stops_in_preflight_naming_hub_id_and_fix(
        model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["eval", "--model", model, "--tasks", "livecodebench:2024-08..2025-02",
                     "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["scalerl eval: task 'livecodebench:2024-08..2025-02' cannot be verified here: "
                   "hub dataset livecodebench/code_generation_lite at "
                   "0fe84c3912ea0c4d4a78037083943e8f0c4dd505 is not in the Hugging Face "
                   "cache and HF_HUB_OFFLINE is set; give a local copy with --data "
                   "livecodebench=PATH (a jsonl/json/parquet file or a save_to_disk directory "
                   "in the hub's schema)"]


def test_a_training_task_without_data_here_is_skipped_not_fatal(copies, model, tmp_path,
                                                                monkeypatch):
    from scalerl.commands.eval import contamination_of

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(var, raising=False)
    plan = plan_of(["--model", model, "--tasks", "math500", "--train-tasks", "deepscaler,polaris",
                    "--out", str(tmp_path / "o"), *data_flags(copies, "math500", "polaris")])
    assert list(plan.train_tasks) == ["polaris"]
    assert plan.train_skipped[0].startswith("task 'deepscaler' cannot be verified here: hub "
                                            "dataset agentica-org/DeepScaleR-Preview-Dataset")
    found = contamination_of(plan)
    assert found["train_tasks"] == ["polaris"] and found["benchmarks"]["math500"]["exact"] == 1


def test_eval_data_for_a_task_not_evaluated_is_a_note_and_no_task_is_refused(
        copies, model, tmp_path, capsys):
    plan = plan_of(["--model", model, "--tasks", "gsm8k", "--out", str(tmp_path),
                    *data_flags(copies, "gsm8k", "mbpp", "polaris")])
    assert list(plan.tasks) == ["gsm8k"] and plan.tasks["gsm8k"].data == copies["gsm8k"]
    assert capsys.readouterr().err.splitlines() == [
        "scalerl eval: note: --data/--revision for mbpp, polaris: not used by this command "
        "(ignored)"]
    assert cli.main(["eval", "--model", model, "--tasks", "gsm8k", "--out", str(tmp_path),
                     "--data", "gsm9k=x.jsonl"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "scalerl eval: --data gsm9k: no task 'gsm9k'; known tasks: aime24, aime25, amc23, ")


def test_score_reads_a_benchmark_from_its_local_copy(copies, tmp_path, capsys):
    from scalerl.local_data import task_with_data

    sample = task_with_data("gsm8k", copies["gsm8k"]).samples("test")[2]  # gold 1600
    rows = [{"id": i, "task": "gsm8k", "sample_id": sample.id, "completion": c}
            for i, c in enumerate(["so \\boxed{1600}", "so \\boxed{1,200}"])]
    path = bf.write_jsonl(tmp_path / "in.jsonl", rows)
    assert cli.main(["score", str(path), *data_flags(copies, "gsm8k")]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["status"] for r in out] == ["correct", "wrong"]


@pytest.mark.parametrize("name", ["livecodebench", "deepcoder"])
def test_score_grades_every_reference_correct_and_every_near_miss_not(name, copies, tmp_path,
                                                                      capsys):
    from scalerl.local_data import task_with_data

    task = task_with_data(name, copies[name])
    rows, gold, near = [], set(), set()
    for sample in [s for split in task.splits for s in task.samples(split)]:
        rows.append({"id": f"{sample.id}/gold", "task": name, "sample_id": sample.id,
                     "completion": bf.gold_program(sample)})
        gold.add(rows[-1]["id"])
        for k, program in enumerate(bf.near_misses(sample)):
            rows.append({"id": f"{sample.id}/near{k}", "task": name, "sample_id": sample.id,
                         "completion": f"```python\n{program}\n```"})
            near.add(rows[-1]["id"])
    path = bf.write_jsonl(tmp_path / "in.jsonl", rows)
    assert cli.main(["score", str(path), "--workers", "2", *data_flags(copies, name)]) == 0
    out = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert {i: out[i]["status"] for i in gold} == dict.fromkeys(gold, "correct")
    assert {i: out[i]["status"] for i in near} == dict.fromkeys(near, "wrong")
    assert len(near) >= 15


class SharedEngine:
    """The session's engine standing in for the one `scalerl eval` would start: it scores with
    the scorer eval built (its Task objects), records the sampling settings, restores on close."""

    def __init__(self, engine, scorer):
        self.engine, self.kept, self.calls = engine, engine.scorer, []
        engine.scorer = scorer

    def generate(self, samples, **kw):
        self.calls.append(kw)
        return self.engine.generate(samples, **kw)

    def close(self):
        self.engine.scorer = self.kept


@pytest.mark.slow
def test_eval_r1_on_four_benchmarks_writes_protocol_pass1_and_contamination(
        copies, engine, tiny_model_path, tmp_path, monkeypatch, capsys):
    made = []

    def start(path, config, *, fp32_head, scorer, log=None):
        made.append(SharedEngine(engine, scorer))
        return made[-1]

    monkeypatch.setattr("scalerl.commands.eval.start_generator", start)
    tasks = "math500,gsm8k,mbpp,livecodebench:2024-08..2025-02"
    out = tmp_path / "eval"
    argv = ["eval", "--model", tiny_model_path, "--tasks", tasks, "--protocol", "r1",
            "--limit", "2", "--n", "4", "--answer-budget", "24", "--train-tasks", "polaris",
            "--out", str(out),
            *data_flags(copies, "math500", "gsm8k", "mbpp", "livecodebench", "polaris")]
    assert cli.main(argv) == 0
    assert {(c["temperature"], c["top_p"], c["n"]) for c in made[0].calls} == {(0.6, 0.95, 4)}
    results = json.loads((out / "results.json").read_text())
    s = results["settings"]
    assert (s["protocol"], s["temperature"], s["top_p"]) == ("r1", 0.6, 0.95)
    assert s["n_by_task"] == dict.fromkeys(tasks.split(","), 4)
    for name, row in results["models"][0]["tasks"].items():
        assert (row["samples"], row["rollouts"]) == (2, 8), name
        assert 0.0 <= row["pass@1"] <= 1.0 and row["stderr"] is not None
        assert row["error_frac"] == 0.0, name  # every verdict came from a working verifier
    c = results["contamination"]["benchmarks"]
    assert (c["math500"]["exact"], c["math500"]["contaminated"]) == (1, 1)
    assert (c["gsm8k"]["exact"], c["gsm8k"]["ngram13"]) == (0, 1)
    assert c["mbpp"]["contaminated"] == 0
    md = (out / "results.md").read_text()
    assert "Protocol **r1**: temperature 0.6, top-p 0.95" in md
    assert "| math500 | 5 | 1 | 1 | 1 | test/nt/1.json |" in md
    assert "contamination: math500: 1 of 5 problems in polaris" in capsys.readouterr().out


@pytest.mark.slow
def test_top_p_reaches_the_engine_a_tiny_nucleus_is_greedy(engine):
    from scalerl.envs.catalog import get_task

    samples = list(get_task("arith").samples("test")[:2])
    budget = Budget(thinking=None, answer=12)
    greedy = engine.generate(samples, n=1, budget=budget, temperature=0.0, seed=1)
    # at T=2 the distribution is flatter; a nucleus of 1e-6 still keeps only the top token
    nucleus = engine.generate(samples, n=2, budget=budget, temperature=2.0, seed=1, top_p=1e-6)
    free = engine.generate(samples, n=2, budget=budget, temperature=2.0, seed=1)
    assert {r.token_ids for r in nucleus} == {r.token_ids for r in greedy}
    assert {r.token_ids for r in free} - {r.token_ids for r in greedy}  # T=2 alone diverges
