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
