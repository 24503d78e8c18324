"""The preflight: a task whose verifier cannot work here stops train/eval/generate before any
model or engine starts, in one line naming the task, what is missing and the fix.

The docker cases are real: DOCKER_HOST points at a socket that does not exist, so the docker
SDK's own connection fails. The user-kind cases register a kind with its own preflight.
"""

import os
import subprocess
import sys
import time

import pytest

from scalerl.envs import catalog, kinds
from scalerl.envs.base import Sample, Score
from scalerl.envs.preflight import PreflightError, check_tasks, task_problems
from scalerl.envs.task import Task

NO_DOCKER = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/scalerl-test-docker.sock"}


def scalerl(*argv: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalerl", *argv], capture_output=True,
                          text=True, timeout=300, env=env)


def test_train_with_an_unreachable_docker_stops_before_step_0_naming_docker(tmp_path):
    run_dir = tmp_path / "run"
    t = time.perf_counter()
    done = scalerl("train", "--set", "sandbox.backend=docker", "--run-dir", str(run_dir),
                   env=NO_DOCKER)
    took = time.perf_counter() - t
    assert done.returncode == 3, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines  # arith needs nothing; synth_code is the one line
    line = lines[0]
    assert line.startswith("scalerl train: task 'synth_code' cannot be verified here")
    assert "sandbox backend 'docker' is not available" in line
    assert "docker daemon not reachable" in line
    assert "fix: start the docker daemon" in line
    assert not run_dir.exists()  # nothing written, no model built, no engine started
    print(f"preflight refusal in {took:.1f} s")


def test_eval_and_generate_run_the_same_preflight(tmp_path):
    spec = tmp_path / "tasks.yaml"
    data = tmp_path / "code.jsonl"
    data.write_text('{"question": "print 1", "input_output": {"inputs": [""], '
                    '"outputs": ["1"]}}\n')
    spec.write_text(f"tasks:\n  - name: docker_code\n    kind: code\n    data: {data.name}\n"
                    "    test_fraction: 1.0\n")
    env = {**NO_DOCKER, "SCALERL_TASKS": str(spec)}
    gen = scalerl("generate", "--model", str(tmp_path / "no-model"), "--task", "docker_code",
                  "--sandbox", "docker", "--out", str(tmp_path / "out.jsonl"), env=env)
    ev = scalerl("eval", "--model", str(tmp_path / "no-model"), "--tasks", "docker_code",
                 "--sandbox", "docker", "--out", str(tmp_path / "eval"), env=env)
    for command, done in (("generate", gen), ("eval", ev)):
        assert done.returncode == 3, (command, done.stderr[-2000:])
        assert done.stderr.startswith(f"scalerl {command}: task 'docker_code' cannot be "
                                      "verified here: sandbox backend 'docker'")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.fixture
def needy_kind(monkeypatch):
    """Kind `needy`, whose verifier needs a file that is not there."""
    catalog.task_names()
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())

    def preflight(options, grading):
        path = options["oracle"]
        return None if os.path.exists(path) else f"oracle {path} is missing; fix: make oracle"

    kinds.register_kind(kinds.Kind("needy", lambda s, c, o, g: Score("wrong"),
                                         "answer", "", preflight=preflight), replace=True)


class Needy(Task):
    name, kind, options = "needy_task", "needy", {"oracle": "/nonexistent/oracle"}

    def build(self, split):
        return [Sample(id="0", task=self.name, prompt="p", answer="a")]


class OwnNeeds(Needy):
    name = "own_needs"

    def preflight(self, grading):
        raise RuntimeError("license server unreachable")


def test_a_kind_declares_what_its_verifier_needs(needy_kind, tmp_path):
    with pytest.raises(PreflightError) as info:
        check_tasks([Needy()])
    assert str(info.value) == ("task 'needy_task' cannot be verified here: oracle "
                               "/nonexistent/oracle is missing; fix: make oracle")
    oracle = tmp_path / "oracle"
    oracle.write_text("")
    ok = Needy()
    ok.options = {"oracle": str(oracle)}
    check_tasks([ok])  # no error once the file is there


def test_a_task_can_declare_its_own_needs_and_a_raising_check_is_reported(needy_kind):
    problems = task_problems([OwnNeeds()])
    assert problems == ["task 'own_needs' cannot be verified here: its preflight raised "
                        "RuntimeError: license server unreachable"]


def test_math_tasks_need_nothing_from_the_machine():
    assert task_problems([catalog.get_task("arith")]) == []
