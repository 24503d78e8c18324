"""`scalerl train` refuses to start a new run over an existing one (nothing written is lost)."""

from scalerl import cli


def test_train_refuses_a_run_dir_that_already_holds_a_run(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert cli.main(["train", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and str(tmp_path) in err[0]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_resume_without_a_checkpoint_says_so(tmp_path, capsys):
    assert cli.main(["train", "--run-dir", str(tmp_path), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
