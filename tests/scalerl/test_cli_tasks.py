"""`scalerl tasks list|show`: sizes, sources, --json, --spec, unknown names in one line."""

import json

import pytest

from scalerl.cli import main
from scalerl.envs import kinds, registry, spec


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    registry.task_names()
    for table in ("_TASKS", "_INSTANCES", "_PREFIXES"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    monkeypatch.setattr(spec, "_FROM_SPEC", {})


def test_list_prints_name_kind_sizes_and_source(capsys):
    assert main(["tasks", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "TRAIN", "VAL", "TEST", "SOURCE"]
    arith = next(line.split() for line in lines if line.startswith("arith "))
    # 6 levels x 50 fixed test problems; no val split.
    assert arith[1] == "math" and arith[3] == "-" and arith[4] == "300"
    assert any(line.startswith("rg:<name>") for line in lines)


def test_list_json_and_a_spec_task(tmp_path, capsys):
    (tmp_path / "d.csv").write_text("problem,answer\n" + "".join(
        f"What is {i} squared?,{i * i}\n" for i in range(20)))
    (tmp_path / "t.yaml").write_text("name: squares\nkind: math\ndata: d.csv\ntest_fraction: 0.5\n")
    assert main(["tasks", "list", "--json", "--spec", str(tmp_path / "t.yaml")]) == 0
    rows = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    sq = rows["squares"]
    assert sq["kind"] == "math" and sq["source"] == str(tmp_path / "d.csv")
    assert sq["splits"]["train"] + sq["splits"]["test"] == 20 and 3 <= sq["splits"]["test"] <= 17


def test_show_prints_messages_gold_and_solution(capsys):
    assert main(["tasks", "show", "arith:add2", "--split", "test", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n--- add2-") == 2
    assert "[system] Think in <think></think>, then give the answer in \\boxed{}." in out
    assert "solution: <think>" in out and "gold: " in out


def test_show_json_rows_round_trip_to_samples(capsys):
    assert main(["tasks", "show", "arith", "-n", "3", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3 and all(r["task"] == "arith" and r["answer"] for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["tasks", "show", "gsm9k"],
     "scalerl tasks: unknown task 'gsm9k'; known tasks: aime24, aime25, amc23, arith, "),
    (["tasks", "show", "rg:maze"], "scalerl tasks: unknown reasoning-gym math dataset 'maze'"),
    (["tasks", "list", "--spec", "missing.yaml"], "scalerl tasks: missing.yaml: no such task"),
])
def test_bad_names_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
