"""A run's local vLLM servers (rollout/local_servers.py) for real: two servers of the tiny model
on CPU, started by a process of their own (tests/rollout/local_servers_child.py). Server 0 dies
(its API process SIGKILLed) and is restarted, rejoining with the weights published before it
died (a zero LM head: every log-prob is -log(vocab), which the original weights never give)
and their version label; the servers compile into cache roots of their own; then the process
that started them is SIGKILLed, as torchrun does to a rank, and none of their processes is
left within the guard's grace (rollout/server_guard.py). One test, one pair of engine starts
and one restart: ~3-5 min on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scalerl.rollout import server_records as records
from scalerl.rollout.local_servers import GUARD_GRACE_S

pytestmark = pytest.mark.slow


def alive(pid: int, started: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_dead_local_server_is_restarted_and_none_outlives_a_sigkilled_run(tiny_model_path,
                                                                             tmp_path):
    here = Path(__file__).parent
    env = {**os.environ, "SCALERL_CACHE": str(tmp_path),  # its records, not the user's
           "PYTHONPATH": os.pathsep.join([str(here), str(here.parent)])}
    child = subprocess.Popen([sys.executable, str(here / "local_servers_child.py"),
                              tiny_model_path], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line, f"the child exited with {child.wait()} before reporting"
        out = json.loads(line)
    finally:
        child.kill()  # SIGKILL: no clean-up of its own runs
        child.wait()
    t = time.monotonic()
    assert out["up"] == [True, True] and out["joined"] == 2
    assert out["metrics"]["servers/restarted_total"] == 1.0
    assert out["metrics"]["servers/lost_total"] == 1.0
    # the restarted server has the zero head published before it died, labelled version 1
    assert out["label"] == "1" and set(out["versions"]) == {"1"}
    assert all(abs(lp - out["uniform"]) < 1e-4 for lp in out["logprobs"]), out["logprobs"]
    assert len(set(out["caches"])) == 2
    assert all(Path(c, "torch_compile_cache").is_dir() for c in out["caches"]), out["caches"]
    # every process of both servers (guard, API server, engine core) ends within the grace
    pids = out["pids"]
    assert len(pids) >= 6
    while any(alive(*p) for p in pids) and time.monotonic() - t < GUARD_GRACE_S + 30:
        time.sleep(0.5)
    left = [p for p in pids if alive(*p)]
    assert left == [], f"processes of the local servers left after SIGKILL: {left}"
    ports = [p for p in psutil.process_iter(["cmdline"]) if any(
        f"--port {port}" in " ".join(p.info["cmdline"] or []) for port in out["ports"])]
    assert ports == []
    # the dead run's records and logs stay (2 records: server 0's first one was removed at its
    # restart); a later start finds nothing of theirs left to stop and removes them
    assert len(list((tmp_path / "local-servers").glob("*.json"))) == 2
    assert all(Path(log).exists() for log in out["logs"])
    assert records.sweep(tmp_path / "local-servers", 5) == []
    assert list((tmp_path / "local-servers").glob("*.json")) == []
    assert not any(Path(log).exists() for log in out["logs"])
