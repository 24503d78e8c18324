"""Grading on Ray (envs/ray_grading.py, envs/ray_remote.py, envs/grading_host.py).

The settings' checks and the grading actor's class run here without Ray. The rest runs on the
session's one 2-node cluster (tests/conftest.py `ray_cluster`: two raylets on this machine):
the same verdicts as local grading on code and math rows (`scalerl.api.score`), on the
reward-hacking suite and the hostile probes; a tool session pinned to its actor; an actor killed
and a node removed mid-grading (their verdicts `error`, counted, the grading goes on); and
`scalerl train` grading and running its tool task on the cluster.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_kind, get_task
from scalerl.envs.grading import Grading, VerifierConfig, close_clusters, cluster_grader
from scalerl.envs.grading_host import GradingHost
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.session import SessionLimits
from scalerl.sandbox.session_types import SessionFailed

ADD = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def on_ray(cluster, **kw) -> Grading:
    return Grading(verifiers=VerifierConfig(cluster="ray", ray_address=cluster.address, **kw))


# --- without Ray ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, says", [
    ("cluster", "slurm", "verifiers.cluster must be one of ['local', 'ray']"),
    ("cores_per_actor", 0, "verifiers.cores_per_actor must be an integer >= 1"),
    ("max_in_flight", True, "verifiers.max_in_flight must be an integer >= 1"),
    ("ray_address", " ", "verifiers.ray_address must be a Ray address"),
])
def test_bad_cluster_settings_are_one_line_errors(field, value, says):
    with pytest.raises(ValueError, match=f"^{says.replace('[', '.').replace(']', '.')}"):
        VerifierConfig(**{field: value})


def test_ray_missing_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec  # Ray is installed here: its absence is simulated
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'scalerl\[ray\]'"):
        VerifierConfig(cluster="ray")


def test_the_run_config_and_flags_set_the_cluster():
    import argparse

    from scalerl.commands.engine_args import grading
    from scalerl.config import load_config

    cfg = load_config(None, ["verifiers.cluster=ray", "verifiers.max_in_flight=3"])
    assert (cfg.grading.verifiers.cluster, cfg.grading.verifiers.max_in_flight) == ("ray", 3)
    args = argparse.Namespace(sandbox=None, math_workers=2, cluster=None, ray_address="h:6379")
    v = grading(args, cfg.grading).verifiers
    assert (v.cluster, v.ray_address, v.math_workers, v.max_in_flight) == ("ray", "h:6379", 2, 3)


def test_a_ray_run_context_places_tool_sessions_on_the_cluster():
    from scalerl.envs.context import run_context
    from scalerl.envs.ray_remote import RemoteSessions
    from scalerl.sandbox.session import LazySessions

    ray = Grading(verifiers=VerifierConfig(cluster="ray", ray_address="10.0.0.1:6379"))
    try:
        assert isinstance(run_context("plain", None, ray).sessions, RemoteSessions)  # lazy
        assert isinstance(run_context("plain", None, Grading()).sessions, LazySessions)
    finally:
        close_clusters()


@pytest.mark.bwrap
def test_the_grading_actor_class_runs_code_and_sessions_here():
    host = GradingHost(workers=1)
    try:
        from scalerl.sandbox.base import Limits

        status, res = host.run_code(SandboxConfig("bwrap"), ["python", "p.py"], b"4\n",
                                    {"p.py": b"print(int(input()) * 2)"}, Limits())
        assert (status, res.status, res.stdout) == ("ok", "ok", b"8\n")
        status, sid = host.open_session(SandboxConfig("bwrap"), SessionLimits())
        assert status == "ok"
        assert host.session_run(sid, "y = 6")[0] == "ok"
        assert host.session_run(sid, "y * 7")[1].output == "42\n"
        assert host.close_session(sid) == ("ok", True)
        status, why = host.session_run(sid, "y")
        assert status == "failed" and "the tool session is gone" in why
    finally:
        host.shutdown()


def test_requests_go_to_the_least_loaded_actor_and_wait_at_its_cap():
    """The dispatch alone (no Ray): two actors of caps 2 and 4; by outstanding / cap, ties to
    the next in turn, worked out by hand: 1, 0, 1, 0, then only actor 1 has room (1, 1); the
    seventh waits until a place is given back."""
    import threading

    from scalerl.envs.ray_dispatch import Dispatch, GradingLost, Slot

    g = Dispatch()
    g.slots = [Slot(0, None, "node-a", "10.0.0.1", cores=1, cap=2),
               Slot(1, None, "node-b", "10.0.0.2", cores=2, cap=4)]
    assert [g.take().index for _ in range(6)] == [1, 0, 1, 0, 1, 1]
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(g.take().index))
    waiter.start()
    time.sleep(0.3)
    assert got == []  # every actor at its cap
    g.give(g.slots[0])
    waiter.join(5)
    assert got == [0]
    g.slots[1].state = "suspect"
    with pytest.raises(GradingLost, match="was lost"):
        g.take(g.slots[1])  # a session's actor that failed: its state is gone
    for s in g.slots:
        s.state = "dropped"
    with pytest.raises(GradingLost, match="every one was dropped"):
        g.take()


def test_an_unreachable_cluster_stops_a_code_run_at_its_preflight():
    grading = Grading(verifiers=VerifierConfig(cluster="ray", ray_address="127.0.0.1:1"))
    try:
        problem = get_task("synth_code").preflight(grading)
        assert problem.startswith("verifiers.ray_address '127.0.0.1:1': nothing answers there")
        verdict = get_kind("code").score(Sample(id="s", task="<code>", prompt="", tests=ADD),
                                         SUM, {}, grading)
        assert verdict.status == "error" and "nothing answers there" in verdict.detail
    finally:
        close_clusters()


def test_a_node_that_cannot_run_the_sandbox_is_refused_with_the_fix():
    """What each actor reported of its node at start (a node without bubblewrap cannot be made
    here for real: these two slots stand for the actors' reports)."""
    from scalerl.envs.ray_grading import RayGrader, Slot

    fix = "sandbox backend 'bwrap' is not available: bwrap not found; fix: install bubblewrap"
    g = RayGrader(None, None, None)
    g._started = True
    g.slots = [Slot(0, None, "node-a", "10.0.0.1", 1, 2, info={"backends": ["bwrap"],
                                                                "problems": {"bwrap": None}}),
               Slot(1, None, "node-b", "10.0.0.2", 1, 2, info={"backends": [],
                                                                "problems": {"bwrap": fix}})]
    assert g.sandbox_problem("bwrap") == f"grading node 10.0.0.2 (Ray) cannot run code: {fix}"
    g.slots[1].info["problems"]["bwrap"] = None
    assert g.sandbox_problem("bwrap") is None


# --- on the session's 2-node cluster -------------------------------------------------------------
def _rows() -> list[dict]:
    """Code rows (right, wrong, timeout, crash, no code) and math rows (equal forms, wrong, no
    answer) of the built-in tasks: verdicts worked out independently by local grading."""
    rows = []
    for s in get_task("synth_code").samples("test")[:3]:
        good = f"```python\n{s.meta['solution']}\n```"
        for j, text in enumerate([good, "```python\nprint(0)\n```",
                                  "```python\nwhile True: pass\n```",
                                  "```python\nraise SystemExit(3)\n```", "no code here"]):
            rows.append({"id": f"{s.id}-{j}", "kind": "code", "completion": text,
                         "tests": dict(s.tests), "options": {"test_timeout_s": 1.0}})
    for k, (answer, gold) in enumerate([("\\boxed{\\frac{1}{2}}", "0.5"), ("\\boxed{3}", "4"),
                                        ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
                                        ("no answer", "7"), ("x = \\frac{6}{4}", "3/2")]):
        rows.append({"id": f"m{k}", "kind": "math", "completion": answer, "answer": gold})
    return rows


def _verdicts(rows, **grading) -> list[tuple]:
    from scalerl.api import score

    return [(v.id, v.status, v.reward, v.detail) for v in score(rows, workers=4, **grading)]


@pytest.mark.slow
@pytest.mark.bwrap
def test_code_and_math_verdicts_on_ray_are_the_local_ones(ray_cluster):
    rows = _rows()
    local = _verdicts(rows, sandbox="bwrap")
    assert {v[1] for v in local} >= {"correct", "wrong", "timeout", "no_answer"}
    assert _verdicts(rows, sandbox="bwrap", cluster="ray",
                     ray_address=ray_cluster.address) == local


@pytest.mark.slow
@pytest.mark.bwrap
def test_the_reward_hacking_suite_scores_the_same_through_ray(ray_cluster):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "code"))
    from test_code_hacks import FORMATS, HACKS

    from scalerl.envs.code.verifier import score_code

    remote = cluster_grader(on_ray(ray_cluster)).backend(SandboxConfig("bwrap"))
    cases = [(h, f) for h in HACKS for f in FORMATS]

    def grade(case, runner):
        hack, fmt = case
        return score_code(f"```python\n{HACKS[hack]}\n```", FORMATS[fmt], test_timeout_s=2.0,
                          sandbox=SandboxConfig("bwrap"), runner=runner)

    with ThreadPoolExecutor(4) as pool:
        local = list(pool.map(lambda c: grade(c, None), cases))
        ray = list(pool.map(lambda c: grade(c, remote), cases))
    assert all(s.status != "correct" for s in ray)
    differ = [(c, a, b) for c, a, b in zip(cases, local, ray, strict=True)
              if (a.status, _unaddressed(a.detail)) != (b.status, _unaddressed(b.detail))]
    assert differ == []


def _unaddressed(detail: str) -> str:
    """A detail without object addresses (`<A object at 0x7f..>` differs run to run)."""
    return re.sub(r"0x[0-9a-f]+", "0x?", detail)


@pytest.mark.slow
@pytest.mark.bwrap
def test_the_hostile_probes_are_contained_through_ray(ray_cluster):
    from scalerl.sandbox.selfcheck import PROBES, run_probe

    remote = cluster_grader(on_ray(ray_cluster)).backend(SandboxConfig("bwrap"))
    escaped = [(p.name, v.escaped) for p in PROBES if (v := run_probe(remote, p)).escaped]
    assert escaped == []


@pytest.mark.slow
@pytest.mark.bwrap
def test_a_tool_session_stays_on_its_actor_and_is_closed_there(ray_cluster):
    remote = cluster_grader(on_ray(ray_cluster))
    sessions = remote.sessions(SandboxConfig("bwrap"))
    a, b = sessions.acquire(), sessions.acquire()
    assert a.slot.node_id != b.slot.node_id  # placed by load: one on each node's actor
    a.run("x = 1")
    for i in range(2, 6):  # state survives between calls: every call went to a's actor
        assert a.run("x += 1\nx").output == f"{i}\n"
    assert a.slot.state == "ok" and b.run("x").status == "error"  # b: its own interpreter
    grader = remote.grader
    assert grader.control(a.slot, "live_sessions") == 1
    a.close()
    assert grader.control(a.slot, "live_sessions") == 0
    with pytest.raises(SessionFailed, match="closed"):
        a.run("x")
    sessions.close()
    assert grader.control(b.slot, "live_sessions") == 0


@pytest.mark.slow
@pytest.mark.bwrap
def test_doctor_reports_the_cluster_nodes(ray_cluster):
    from scalerl.doctor import cluster

    checks = cluster(on_ray(ray_cluster))
    assert checks[0].name == "grading cluster" and checks[0].status == "ok"
    assert "2 nodes, 2 cores, 2 grading actors" in checks[0].detail
    nodes = checks[1:]
    assert len(nodes) == 2 and all(c.status == "ok" and "bwrap" in c.detail for c in nodes)


SLEEPY = ("```python\nimport time\ntime.sleep(2)\na, b = map(int, input().split())\n"
          "print(a + b)\n```")


def _grade_all(grading, n: int, during=None) -> list:
    code = get_kind("code")
    sample = Sample(id="s", task="<code>", prompt="", tests=ADD)
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(code.score, sample, SLEEPY, {}, grading) for _ in range(n)]
        if during is not None:
            time.sleep(1.0)
            during()
        return [f.result() for f in futures]


@pytest.mark.slow
@pytest.mark.bwrap
def test_a_dead_actor_or_node_gives_counted_errors_and_grading_goes_on(ray_cluster):
    close_clusters()  # the other tests' actors hold the two nodes' CPUs
    node = ray_cluster.add_node(num_cpus=1, object_store_memory=80 << 20)
    grading = on_ray(ray_cluster, max_in_flight=2)
    grader = cluster_grader(grading).grader.start()
    assert grader.stats()["ok"] == 3
    victim = next(s for s in grader.slots if s.node_id == node.node_id)

    scores = _grade_all(grading, 6, lambda: ray_cluster.remove_node(node, allow_graceful=False))
    statuses = sorted(s.status for s in scores)  # two per actor: the removed node's two fail
    assert statuses == ["correct"] * 4 + ["error"] * 2, [s.detail for s in scores]
    assert all("grading actor" in s.detail for s in scores if s.status == "error")
    assert grader.stats()["lost"] == 2 and victim.state in ("suspect", "dropped")
    assert {s.status for s in _grade_all(grading, 4)} == {"correct"}  # the run goes on

    crashed = next(s for s in grader.slots if s.state == "ok")
    pid = crashed.pid
    scores = _grade_all(grading, 4, lambda: os.kill(pid, signal.SIGKILL))
    assert sorted(s.status for s in scores) == ["correct"] * 2 + ["error"] * 2
    deadline = time.monotonic() + 60
    while crashed.state != "ok" and time.monotonic() < deadline:  # Ray restarts it
        time.sleep(0.5)
    assert crashed.state == "ok" and crashed.pid != pid
    assert {s.status for s in _grade_all(grading, 4)} == {"correct"}
    close_clusters()


@pytest.mark.slow
@pytest.mark.bwrap
def test_train_grades_and_runs_its_tools_on_ray(ray_cluster, tiny_model_path, tmp_path):
    import json
    import subprocess

    close_clusters()  # the run's own grader takes the nodes' CPUs
    run_dir = tmp_path / "run"
    sets = ["steps=2", f"policy.model={tiny_model_path}", "val.every=0", "checkpoint.every=0",
            "offpolicy.prompts_per_step=2", "offpolicy.rollouts_per_prompt=4",
            "filters.zero_variance=false", "log.progress=false", "log.trackers=[]",
            "verifiers.cluster=ray", f"verifiers.ray_address={ray_cluster.address}",
            "sandbox.backend=bwrap",
            "tasks=[{name: arith_tool, budget: {answer: 64, total: 160}},"
            " {name: synth_code, budget: {answer: 96}}]"]
    cmd = [sys.executable, "-m", "scalerl", "train", "--run-dir", str(run_dir),
           *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if "loss/value" in r or "batch/empty" in r}
    assert sorted(steps) == [1, 2]
    assert all(row["rollout/error_frac"] == 0 for row in steps.values()), steps
    assert all("rollout/tool_calls_mean" in row for row in steps.values())


@pytest.mark.slow
@pytest.mark.bwrap
def test_score_on_a_ray_it_starts_leaves_nothing_behind():
    """`scalerl score --cluster ray` without an address starts a Ray here (its temp dir under
    TMPDIR), grades on it, and removes the temp dir (sessions, logs, spilled objects) at exit."""
    import json
    import shutil
    import subprocess
    import tempfile

    tmp = tempfile.mkdtemp(prefix="srl-")  # short: Ray's socket paths are under it
    os.chmod(tmp, 0o755)  # the sandbox's compiled-harness cache under it is read by its uid
    try:
        rows = "".join(json.dumps(r) + "\n" for r in [
            {"id": 1, "kind": "code", "completion": SUM, "tests": ADD},
            {"id": 2, "kind": "math", "completion": "\\boxed{0.5}", "answer": "\\frac{1}{2}"}])
        env = {**os.environ, "TMPDIR": tmp}
        env.pop("RAY_TMPDIR", None)
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.run([sys.executable, "-m", "scalerl", "score", "--cluster", "ray",
                               "--sandbox", "bwrap"], input=rows, capture_output=True,
                              text=True, timeout=240, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert [json.loads(line)["status"] for line in proc.stdout.splitlines()] == [
            "correct", "correct"], proc.stdout
        assert [n for n in os.listdir(tmp) if "ray" in n] == []  # the sandbox's cache may stay
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
