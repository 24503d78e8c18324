"""The `scalerl` dispatcher: every subcommand has --help; the top-level help stays light."""

import subprocess
import sys

import pytest

from scalerl import cli


def test_top_level_help_imports_no_subcommand_torch_or_vllm():
    code = ("import sys; from scalerl import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'vllm', 'transformers') or m.startswith('scalerl.commands.')]\n"
            "print('HEAVY', heavy)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]
    for name in cli.SUBCOMMANDS:
        assert name in proc.stdout


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
