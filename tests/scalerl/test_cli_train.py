"""`scalerl train` refuses to start a new run over an existing one (nothing written is lost)."""

import pytest

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


def fake_run(tmp_path, overrides=("offpolicy.mode=ppo", "steps=6")):
    """A run directory with the run's config.yaml and a checkpoint marker (no weights needed:
    the config is read and checked before anything loads the checkpoint)."""
    import yaml

    from scalerl.config import load_config, to_dict

    cfg = load_config(None, list(overrides))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    step = tmp_path / "checkpoints" / "step-000004"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"")
    return tmp_path


def test_resume_reads_the_runs_own_config_not_the_defaults(tmp_path, capsys):
    run = fake_run(tmp_path)
    before = (run / "config.yaml").read_text()
    assert cli.main(["train", "--run-dir", str(run), "--resume", "--print-config"]) == 0
    shown = capsys.readouterr().out
    assert "mode: ppo" in shown and "steps: 6" in shown  # the defaults are pipelinerl, 120
    assert (run / "config.yaml").read_text() == before


def test_resume_refuses_a_setting_that_would_change_what_the_run_trains(tmp_path, capsys):
    run = fake_run(tmp_path)
    before = (run / "config.yaml").read_text()
    argv = ["train", "--run-dir", str(run), "--resume", "--set", "loss.name=grpo"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--set loss.name 'cispo' -> 'grpo': cannot change "
                                               "when a run is resumed")
    assert "steps" in err[0]  # and says what may change
    assert (run / "config.yaml").read_text() == before
    assert cli.main(["train", "--run-dir", str(run), "--resume", "--config", "scalerl"]) == 2
    assert "--config cannot be given" in capsys.readouterr().err


def test_resume_config_reports_the_settings_it_changes():
    from scalerl.config import load_config, resume_config, to_dict

    data = to_dict(load_config(None, ["offpolicy.mode=ppo", "steps=6"]))
    cfg, changes = resume_config(data, ["steps=12", "sandbox.backend=bwrap-cold",
                                        "val.every=3", "val.n=2"])
    assert cfg.steps == 12 and cfg.offpolicy.mode == "ppo"
    assert changes == {"steps": (6, 12), "sandbox.backend": (None, "bwrap-cold"),
                       "val.every": (20, 3), "val.n": (4, 2)}
    assert resume_config(data, [])[1] == {}
    assert resume_config(data, ["offpolicy.mode=ppo"])[1] == {}  # the run's own value: fine


def test_the_end_of_run_summary_warns_per_task_above_five_percent_errors():
    rows = [{"step": 0, "val/arith/error_frac": 0.0, "val/synth_code/error_frac": 0.995},
            {"step": 20, "val/arith/error_frac": 0.06, "val/synth_code/error_frac": 0.9},
            {"step": 40, "val/arith/error_frac": 0.05}]
    from scalerl.commands.train import error_warnings

    lines = error_warnings(rows)
    assert len(lines) == 2
    assert lines[0].startswith("warning: held-out arith: 6.0% of the rollouts at step 20 were "
                               "verifier errors")
    assert lines[1].startswith("warning: held-out synth_code: 99.5% of the rollouts at step 0")
    assert error_warnings([{"step": 0, "val/arith/error_frac": 0.05}]) == []


def test_a_resume_may_wait_longer_for_the_generator_but_not_change_the_engine():
    from scalerl.config import ConfigError, load_config, resume_config, to_dict

    data = to_dict(load_config(None, ["offpolicy.mode=ppo", "steps=6"]))
    _, changes = resume_config(data, ["engine.weight_timeout_s=900", "engine.server_wait_s=60",
                                      "engine.server_max_requests=64"])
    assert changes == {"engine.weight_timeout_s": (300.0, 900.0),
                       "engine.server_wait_s": (300.0, 60.0),
                       "engine.server_max_requests": (None, 64)}
    with pytest.raises(ConfigError, match=r"^--set engine.max_model_len 512 -> 2048: cannot "
                                          "change when a run is resumed"):
        resume_config(data, ["engine.max_model_len=2048"])


def test_a_resume_may_generate_on_other_servers(tmp_path, capsys):
    """Servers are infrastructure: a replaced or added server is taken on `--resume` (the run's
    weights go to each as it joins: tests/rollout/test_server_resume.py); the engine's settings
    that shape what it generates still may not change."""
    from scalerl.config import ConfigError, load_config, resume_config, to_dict

    run = fake_run(tmp_path, ("offpolicy.mode=ppo", "steps=6",
                              "engine.servers=[http://gen-0:8000,http://gen-1:8000]"))
    new = "[http://gen-0:8000,http://gen-2:8000,http://gen-3:8000]"  # gen-1 replaced, one added
    argv = ["train", "--run-dir", str(run), "--resume", "--set", f"engine.servers={new}",
            "--print-config"]
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    assert "http://gen-2:8000" in shown and "http://gen-3:8000" in shown
    assert "http://gen-1:8000" not in shown
    data = to_dict(load_config(None, ["engine.servers=[http://gen-0:8000]"]))
    cfg, changes = resume_config(data, ["engine.servers=[http://gen-9:8000]"])
    assert cfg.engine.servers == ("http://gen-9:8000",)
    assert changes == {"engine.servers": (["http://gen-0:8000"], ["http://gen-9:8000"])}
    for refused in ("engine.dtype=bfloat16", "engine.weight_transfer=nccl", "policy.model=x/y"):
        with pytest.raises(ConfigError, match="cannot change when a run is resumed"):
            resume_config(data, [refused])
