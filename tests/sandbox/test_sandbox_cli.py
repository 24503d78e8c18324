"""`scalerl sandbox ...` and `scalerl bench sandbox` end to end, through the real CLI."""

from __future__ import annotations

import json

from scalerl.cli import main


def test_backends_json_lists_every_backend(capsys):
    assert main(["sandbox", "backends", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert set(table) == {"bwrap", "bwrap-cold", "docker", "process"}
    assert all(set(row) == {"available", "reason"} for row in table.values())


def test_run_prints_one_json_and_exits_0_for_a_failing_program(tmp_path, capsys,
                                                              secure_backend):
    prog = tmp_path / "p.py"
    prog.write_text("import sys\nprint(sys.stdin.read().upper())\nsys.exit(4)\n")
    stdin = tmp_path / "in.txt"
    stdin.write_text("abc")
    code = main(["sandbox", "run", str(prog), "--stdin", str(stdin), "--backend",
                 secure_backend.name, "--timeout", "5", "--memory-mb", "256"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (out["status"], out["exit_code"], out["stdout"]) == ("runtime_error", 4, "ABC\n")


def test_run_missing_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["sandbox", "run", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_run_unknown_backend_names_the_known_ones(tmp_path, capsys):
    prog = tmp_path / "p.py"
    prog.write_text("pass")
    assert main(["sandbox", "run", str(prog), "--backend", "nope"]) == 2
    assert "known: ['bwrap', 'bwrap-cold', 'docker', 'process']" in capsys.readouterr().err


def test_check_passes_on_a_secure_backend(capsys, secure_backend):
    code = main(["sandbox", "check", "--backend", secure_backend.name, "--probe", "sleep",
                 "--probe", "daemon"])
    assert code == 0, capsys.readouterr().out


def test_check_fails_on_the_process_backend(capsys):
    """It contains only part of the suite, so check must exit non-zero and say what."""
    assert main(["sandbox", "check", "--backend", "process", "--probe", "segfault"]) == 1
    assert "NOT CONTAINED by design" in capsys.readouterr().out


def test_bench_sandbox_json_has_the_promised_keys(capsys, require_backend):
    require_backend("bwrap")
    assert main(["bench", "sandbox", "--json", "--n", "8", "--rounds", "2", "--rss-runs", "20",
                 "--backend", "bwrap"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline_runs_per_s"] > 0
    assert out["backends"]["bwrap"]["runs_per_s"] > 0 and out["backends"]["bwrap"]["ratio"] > 0
    assert out["backends"]["bwrap"]["correct"] == 8
    assert out["grader_rss_mb_end"] > 0 and out["grader_rss_mb_start"] > 0
