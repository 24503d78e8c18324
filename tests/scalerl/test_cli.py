"""The `scalerl` dispatcher: every subcommand has --help; an unbuilt one says so and exits 2."""

import subprocess
import sys

import pytest

from scalerl import cli


def test_unbuilt_subcommand_says_so_in_one_line_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(cli.SUBCOMMANDS, "warp", ("travel faster than light", "#99"))
    assert cli.main(["warp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "not built yet" in err[0] and "#99" in err[0]


def test_no_subcommand_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_every_subcommand_has_help(name):
    proc = subprocess.run([sys.executable, "-m", "scalerl", name, "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"scalerl {name}" in proc.stdout


@pytest.mark.parametrize("argv,option", [
    (["bench", "rollout", "--repeats", "0"], "--repeats"),
    (["bench", "train", "--steps", "-3"], "--steps"),
    (["bench", "sandbox", "--n", "many"], "--n"),
    (["bench", "verify", "--samples", "0"], "--samples"),
    (["bench", "fit", "--repeats", "0"], "--repeats"),
    (["bench", "code", "--workers", "0"], "--workers"),
])
def test_bench_counts_must_be_positive(argv, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}: expected a positive integer, got" in err
