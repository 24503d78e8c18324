"""The task flags every command shares (scalerl/local_data.py): `--spec`, `--data`, `--revision`
on tasks, score, eval, generate and train; one standard set of `--data` flags works with each
(a real task a command does not use is a one-line note, a name that is no task is refused with
the list), and a training set with answerless rows loads through them skipped and counted."""

from __future__ import annotations

import json

import bench_fixtures as bf
import pytest
import yaml

from scalerl import cli
from scalerl.envs import kinds, registry, spec

PIN = "b6ae8c60f5c1f2b594e2140b91c49c9ad0949e29"  # DeepScaleR's pinned revision
SKIPPED = ("2 rows skipped (1 no answer: `answer` empty, no \\boxed{} in `solution`; 1 no "
           "answer: `answer` empty, no `solution`)")
"""The summary of `deepscaler_rows(200, 2)`: its two answerless rows, by reason."""


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    registry.task_names()
    for table in ("_TASKS", "_INSTANCES", "_PREFIXES"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    monkeypatch.setattr(spec, "_FROM_SPEC", {})


@pytest.fixture
def squares(tmp_path):
    (tmp_path / "d.csv").write_text("problem,answer\n" + "".join(
        f"What is {i} squared?,{i * i}\n" for i in range(20)))
    path = tmp_path / "t.yaml"
    path.write_text("name: squares\nkind: math\ndata: d.csv\ntest_fraction: 0.5\n")
    return str(path)


@pytest.fixture
def answerless(tmp_path):
    """A DeepScaleR copy of 200 rows, 2 of them without a usable answer (1%)."""
    return str(bf.write_jsonl(tmp_path / "deepscaler.jsonl", bf.deepscaler_rows(200, 2)))


def test_tasks_list_shows_a_training_set_with_answerless_rows_skipped_and_counted(
        answerless, capsys, caplog):
    with caplog.at_level("WARNING", logger="scalerl.data"):
        assert cli.main(["tasks", "list", "--json", "--data", f"deepscaler={answerless}"]) == 0
    out = capsys.readouterr()
    rows = {r["name"]: r for r in map(json.loads, out.out.splitlines())}
    ds = rows["deepscaler"]
    assert sum(ds["splits"].values()) == 198 and "revision" not in ds  # a local copy
    assert ds["skipped"] == {"no answer: `answer` empty, no `solution`": 1,
                             "no answer: `answer` empty, no \\boxed{} in `solution`": 1}
    assert rows["polaris"]["revision"] == "296f8e34132e63f4a1d70e0dcc8bddebb43f03e4"
    assert [r.getMessage() for r in caplog.records] == [
        f"deepscaler: {answerless}: {SKIPPED} of 200 read"]
    assert cli.main(["tasks", "list", "--data", f"deepscaler={answerless}"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("deepscaler "))
    assert line.endswith(f"; {SKIPPED}")


def test_score_grades_a_training_set_read_with_its_answerless_rows_skipped(
        answerless, tmp_path):
    """The real command in its own process (~5 s): the one summary line reaches stderr."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from scalerl.local_data import task_with_data

    sample = task_with_data("deepscaler", answerless).samples("train")[0]
    rows = [{"id": i, "task": "deepscaler", "sample_id": sample.id, "completion": c}
            for i, c in enumerate([f"so \\boxed{{{sample.answer}}}", "so \\boxed{-1}"])]
    path = bf.write_jsonl(tmp_path / "in.jsonl", rows)
    scalerl = str(Path(sys.executable).with_name("scalerl"))
    out = subprocess.run([scalerl, "score", str(path), "--data", f"deepscaler={answerless}",
                          "--data", f"math500={answerless}"],  # an unused real task: fine
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert [json.loads(r)["status"] for r in out.stdout.splitlines()] == ["correct", "wrong"]
    assert [x for x in out.stderr.splitlines() if "skipped" in x] == [
        f"deepscaler: {answerless}: {SKIPPED} of 200 read"]


@pytest.mark.parametrize("argv, message", [
    (["tasks", "show", "arith", "--data", "gsm9k=x.jsonl"],
     "scalerl tasks: --data gsm9k: no task 'gsm9k'; known tasks: aime24, aime25, amc23, arith, "),
    (["score", "--revision", "rg=main"], None),  # a family is a name: accepted (stdin is empty)
    (["score", "--revision", "nope:x=main"], "scalerl score: --revision nope:x: no task "),
    (["generate", "--model", "/nonexistent", "--task", "arith", "--out", "o.jsonl",
      "--revision", "gsm9k=main"], "scalerl generate: --revision gsm9k: no task 'gsm9k'"),
    (["tasks", "show", "arith", "--revision", "arith=main"],
     "scalerl tasks: task 'arith' is not read from the hub, so --revision/revision: cannot pin"),
])
def test_a_name_that_is_no_task_is_refused_in_one_line_with_the_list(argv, message, capsys,
                                                                      monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    if message is None:
        assert code == 0, err
        return
    assert code == 2 and len(err) == 1 and err[0].startswith(message), err


def test_tasks_show_notes_a_data_flag_for_a_task_it_does_not_use(squares, capsys):
    assert cli.main(["tasks", "show", "arith:add2", "-n", "1", "--data", "mbpp=/x/mbpp.jsonl",
                     "--revision", "math500=main"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["scalerl tasks: note: --data/--revision for math500, mbpp: not used by this "
                   "command (ignored)"]


def test_eval_and_generate_take_spec_tasks(squares, tmp_path, capsys):
    from scalerl.commands.eval import prepare

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    args = cli.build_parser("eval").parse_args([
        "eval", "--model", str(model), "--tasks", "squares", "--spec", squares,
        "--out", str(tmp_path / "o")])
    plan = prepare(args)
    assert plan.tasks["squares"].name == "squares" and len(plan.tasks["squares"].samples(
        "test")) + len(plan.tasks["squares"].samples("train")) == 20
    # generate resolves its task (from the spec) before it looks for the model
    assert cli.main(["generate", "--model", "/nonexistent", "--task", "squares", "--spec",
                     squares, "--out", str(tmp_path / "g.jsonl")]) == 2
    assert "no config.json there" in capsys.readouterr().err


def test_train_takes_spec_tasks_and_records_a_revision_in_its_config(squares, capsys):
    assert cli.main(["train", "--spec", squares, "--set", "tasks=[{name: squares}]",
                     "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["tasks"][0]["name"] == "squares"
    assert cli.main(["train", "--set", "tasks=[{name: deepscaler}]", "--revision",
                     f"deepscaler={PIN[:12]}", "--data", "mbpp=/x/mbpp.jsonl",
                     "--print-config"]) == 0
    out = capsys.readouterr()
    assert yaml.safe_load(out.out)["tasks"][0]["revision"] == PIN[:12]
    assert out.err.splitlines() == []  # mbpp is a benchmark: its copy serves the start-up check
    assert cli.main(["train", "--set", "tasks=[{name: arith}]", "--data",
                     "deepcoder=/x/dc.jsonl", "--print-config"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "scalerl train: note: --data/--revision for deepcoder: not used by this command "
        "(ignored)"]


def test_a_resumed_run_takes_spec_but_not_data_or_revision(tmp_path, capsys):
    from scalerl.config import load_config, to_dict

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config(None, []))))
    (tmp_path / "checkpoints" / "step-000001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000001" / "trainer_state.pt").write_bytes(b"")
    base = ["train", "--run-dir", str(tmp_path), "--resume", "--print-config"]
    assert cli.main([*base, "--revision", "math500=main"]) == 2
    assert "--data and --revision cannot be given with --resume" in capsys.readouterr().err
    (tmp_path / "s.yaml").write_text("name: extra\nkind: math\ndata: d.csv\n")
    assert cli.main([*base, "--spec", str(tmp_path / "s.yaml")]) == 0


def test_eval_records_each_tasks_source_revision_skips_and_merges(tmp_path):
    from scalerl.evaluation.report import data_lines, task_data
    from scalerl.local_data import Sources

    rows = bf.deepscaler_rows(200, 2)
    rows.append(dict(rows[0]))  # an exact copy: merged
    copy = str(bf.write_jsonl(tmp_path / "ds2.jsonl", rows))
    tasks = Sources({"deepscaler": copy}).resolve(["deepscaler", "arith"])
    data = task_data(tasks, "test")
    assert data["deepscaler"]["revision"] is None and copy in data["deepscaler"]["source"]
    assert data["deepscaler"]["merged"] == 1 and sum(data["deepscaler"]["skipped"].values()) == 2
    assert data["arith"] == {"source": tasks["arith"].source, "revision": None, "skipped": {},
                             "merged": 0}
    assert data_lines(data) == [
        f"data: deepscaler: {SKIPPED}; 1 duplicate rows merged"]
