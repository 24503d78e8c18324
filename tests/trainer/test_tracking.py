"""The experiment trackers (trainer/trackers.py, trainer/tracking.py), real ones, offline: W&B in
offline mode and trackio's local store, both read back from their own files (tests/tracked.py).

Each tracked run is its own process (W&B and trackio keep process-wide state, and read their
environment once): a small script builds a `Tracking`, logs, finishes.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tracked import offline_env, trackio_logs, trackio_runs, wandb_runs, wandb_table

from scalerl.trainer.config import FieldError, LogConfig
from scalerl.trainer.trackers import TRACKERS, installed
from scalerl.trainer.tracking import STATE_FILE, flatten, scalars

SCRIPT = """if True:
    import json, sys
    from pathlib import Path
    from scalerl.trainer.trackers import TrackedRun
    from scalerl.trainer.tracking import Tracking
    names, run_dir, first, last, desc = sys.argv[1].split(","), Path(sys.argv[2]), \\
        int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
    t = Tracking(names, TrackedRun("t21", "unit", ("x",), run_dir), desc)
    print("STARTED", ",".join(t.trackers), t.last_step, flush=True)
    for step in range(first, last + 1):
        table = (["step", "text"], [[step, f"row {step}"]])
        sent = t.log(step, {"reward/mean": step / 10, "no/data": float("nan")},
                     {f"samples/step_{step:06d}": table})
        print("SENT" if sent else "SKIPPED", step, flush=True)
    t.finish()
"""


def track(tmp_path: Path, names: str, first: int, last: int, desc: dict | None = None,
          env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, names, str(tmp_path / "run"), str(first), str(last),
         json.dumps(desc or {"recipe": "tiny-cpu", "config": {"steps": 6}})],
        env=env or offline_env(tmp_path, home=True), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def warnings_of(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("warning: ")]


def test_the_registry_is_accelerates_trackers():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    assert TRACKERS.names() == sorted(LOGGER_TYPE_TO_CLASS)


def test_log_config_names_the_allowed_trackers():
    with pytest.raises(FieldError, match="allowed: aim, clearml, comet_ml, dvclive, mlflow, "
                                         "swanlab, tensorboard, trackio, wandb"):
        LogConfig(trackers=("wandb", "weights-and-biases"))
    with pytest.raises(FieldError, match="each at most once"):
        LogConfig(trackers=("wandb", "wandb"))
    assert LogConfig().trackers == ("tensorboard",)


def test_flatten_gives_every_tracker_plain_values():
    assert flatten({"a": {"b": 1, "c": None}, "ks": [1, 4], "tasks": [{"name": "arith"}],
                    "s": "x"}) == {"a.b": 1, "a.c": "null", "ks": "[1, 4]",
                                   "tasks.0.name": "arith", "s": "x"}
    assert scalars({"a": 1, "b": float("nan"), "c": "text", "d": True, "e": 2.5}) == {
        "a": 1.0, "e": 2.5}


def test_wandb_and_trackio_reopen_the_same_run_and_never_get_a_step_twice(tmp_path):
    first = track(tmp_path, "wandb,trackio", 0, 3)
    assert "STARTED wandb,trackio -1" in first.stdout and not warnings_of(first)
    record = json.loads((tmp_path / "run" / STATE_FILE).read_text())
    assert record["last_step"] == 3 and record["runs"]["trackio"] == {"name": "unit"}
    # reopened after a "kill" that lost steps 2-3 of metrics.jsonl: they are taken again
    second = track(tmp_path, "wandb,trackio", 2, 5)
    assert "STARTED wandb,trackio 3" in second.stdout
    assert "SKIPPED 2" in second.stdout and "SKIPPED 3" in second.stdout
    assert "SENT 4" in second.stdout and "SENT 5" in second.stdout
    runs = wandb_runs(tmp_path / "run")
    assert len(runs) == 2 and runs[0]["id"] == runs[1]["id"] == record["runs"]["wandb"]["id"]
    steps = [row["_step"] for run in runs for row in run["history"]]
    assert steps == [0, 1, 2, 3, 4, 5]
    rows = [row for run in runs for row in run["history"]]
    assert [row["reward/mean"] for row in rows] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert all("no/data" not in row for row in rows)
    last = runs[1]
    assert wandb_table(last, last["history"][-1], "samples/step_000005") == {
        "columns": ["step", "text"], "data": [[5, "row 5"]]}
    assert runs[0]["config"]["recipe"] == "tiny-cpu" and "recipe" not in runs[1]["config"]
    assert runs[0]["tags"] == ["x"]
    trackio = tmp_path / "trackio"
    assert trackio_runs(trackio, "t21") == ["unit"]  # resumed: no second run
    logs = trackio_logs(trackio, "t21", "unit")
    assert [r["step"] for r in logs] == [0, 1, 2, 3, 4, 5]
    assert logs[5]["samples/step_000005"]["_value"] == [{"step": 5, "text": "row 5"}]


def test_a_new_trackio_run_never_takes_the_name_of_another(tmp_path):
    track(tmp_path / "a", "trackio", 0, 0, env=offline_env(tmp_path, home=True))
    track(tmp_path / "b", "trackio", 0, 0, env=offline_env(tmp_path, home=True))
    assert sorted(trackio_runs(tmp_path / "trackio", "t21")) == ["unit", "unit-2"]
    record = json.loads((tmp_path / "b" / "run" / STATE_FILE).read_text())
    assert record["runs"]["trackio"] == {"name": "unit-2"}  # what --resume reopens


def test_a_missing_tracker_is_one_warning_and_the_others_log(tmp_path):
    absent = next((n for n in TRACKERS.names() if not installed(n)), None)
    if absent is None:
        pytest.skip("every tracker Accelerate knows is installed here")
    done = track(tmp_path, f"tensorboard,{absent}", 0, 2)
    assert warnings_of(done) == [f"warning: tracker {absent} is not installed: "
                                 f"{TRACKERS[absent].install}; the run goes on without it"]
    assert "STARTED tensorboard -1" in done.stdout and "SENT 2" in done.stdout
    assert list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))


def test_wandb_without_credentials_is_one_warning_with_the_fix(tmp_path):
    env = offline_env(tmp_path, home=True)
    del env["WANDB_MODE"]  # online, with no API key anywhere (HOME and NETRC are empty)
    done = track(tmp_path, "wandb,trackio", 0, 1, env=env)
    lines = warnings_of(done)
    assert len(lines) == 1 and lines[0].startswith("warning: tracker wandb could not start: ")
    assert "WANDB_MODE=offline" in lines[0] and "the run goes on without it" in lines[0]
    assert "STARTED trackio -1" in done.stdout and "SENT 1" in done.stdout
    assert [r["step"] for r in trackio_logs(tmp_path / "trackio", "t21", "unit")] == [0, 1]


def test_the_description_is_recorded_once_and_again_only_when_it_changed(tmp_path):
    def hparams() -> int:  # TensorBoard writes an hparams.yml per recorded description
        return len(list((tmp_path / "run" / "tb").rglob("hparams.yml")))

    track(tmp_path, "tensorboard", 0, 1, {"recipe": "tiny-cpu", "steps": 6})
    assert hparams() == 1
    track(tmp_path, "tensorboard", 2, 3, {"recipe": None, "steps": 6})  # a resume: same run
    assert hparams() == 1
    track(tmp_path, "tensorboard", 4, 5, {"recipe": None, "steps": 9})  # --resume --set steps=9
    assert hparams() == 2
    record = json.loads((tmp_path / "run" / STATE_FILE).read_text())
    assert record["description"] == {"recipe": "tiny-cpu", "steps": 9}


def test_wandb_offline_and_trackio_log_with_no_network_at_all(tmp_path):
    """In a network namespace of its own (no interface up, loopback neither), both start and
    store every step: trackio's local store and W&B's offline mode reach for no host."""
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"]).returncode != 0:
        pytest.skip("no network namespace here (unshare -n needs root or user namespaces)")
    done = subprocess.run(
        [unshare, "-n", sys.executable, "-c", SCRIPT, "wandb,trackio", str(tmp_path / "run"),
         "0", "2", json.dumps({"recipe": "tiny-cpu"})],
        env=offline_env(tmp_path, home=True), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STARTED wandb,trackio -1" in done.stdout and not warnings_of(done)
    assert [h["_step"] for h in wandb_runs(tmp_path / "run")[0]["history"]] == [0, 1, 2]
    assert [r["step"] for r in trackio_logs(tmp_path / "trackio", "t21", "unit")] == [0, 1, 2]
