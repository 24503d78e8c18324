"""`scalerl doctor`: one line per check, the fix under what is not ok, exit 1 when something the
embedded default needs fails. The failing case is real: bwrap hidden from PATH and DOCKER_HOST at a
socket that does not exist, so no sandbox backend works and code tasks could only score errors."""

import json
import os
import subprocess
import sys

import pytest

from scalerl.sandbox import available_backends


def doctor(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalerl", "doctor", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_quick_doctor_reports_every_part_of_this_machine():
    done = doctor("--quick", "--json")
    report = json.loads(done.stdout)
    names = [c["name"] for c in report["checks"]]
    for name in ("machine", "gpu", "cgroups", "sandbox bwrap", "sandbox docker", "code tasks",
                 "torch", "vllm", "hf cache", "hf offline", "tiny model"):
        assert name in names, names
    assert "engine" not in names  # --quick
    assert all(c["status"] in ("ok", "warn", "fail") for c in report["checks"])
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok")
    assert done.returncode == (0 if report["ok"] else 1)
    if available_backends()["bwrap"][0]:
        assert {c["name"]: c["status"] for c in report["checks"]}["code tasks"] == "ok"


def test_doctor_fails_when_no_sandbox_can_grade_code(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path),  # an empty PATH: no bwrap
           "DOCKER_HOST": "unix:///nonexistent/scalerl-test-docker.sock"}
    done = doctor("--quick", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    bwrap = next(i for i, line in enumerate(lines) if line.split()[1:3] == ["sandbox", "bwrap"])
    assert lines[bwrap].startswith("FAIL") and "bubblewrap not installed" in lines[bwrap]
    assert "fix: install bubblewrap" in lines[bwrap + 1]
    assert any(line.startswith("FAIL  code tasks") for line in lines)
    assert lines[-1].endswith("`scalerl train` cannot run as it is")


@pytest.mark.slow
def test_doctor_starts_the_engine_on_the_tiny_model(tmp_path, tiny_model_path):
    log = tmp_path / "engine.log"
    done = doctor("--json", "--log", str(log))
    engine = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "engine"]
    assert engine and engine[0]["status"] == "ok", engine
    assert "vLLM started on the tiny model" in engine[0]["detail"]
    assert log.stat().st_size > 0  # the engine's own output went there, not to the report
    assert "INFO" not in done.stdout


def test_doctor_says_which_trackers_are_installed_and_usable(tmp_path):
    """W&B installed with no API key anywhere: a warning with the fix; offline, usable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_"))}
    env |= {"HOME": str(tmp_path), "NETRC": str(tmp_path / ".netrc"),
            "TRACKIO_DIR": str(tmp_path / "trackio")}

    def trackers(extra: dict) -> dict:
        report = json.loads(doctor("--quick", "--json", env=env | extra).stdout)
        return {c["name"]: c for c in report["checks"] if c["name"].startswith("tracker")}

    online = trackers({})
    assert online["tracker wandb"]["status"] == "warn"
    assert "no W&B API key" in online["tracker wandb"]["detail"]
    assert "WANDB_MODE=offline" in online["tracker wandb"]["fix"]
    line = online["trackers"]["detail"]
    assert "tensorboard (<run-dir>/tb)" in line
    assert f"trackio (local: {tmp_path / 'trackio'}" in line  # never the hub unless asked
    offline = trackers({"WANDB_MODE": "offline"})
    assert "tracker wandb" not in offline and "wandb (offline" in offline["trackers"]["detail"]
