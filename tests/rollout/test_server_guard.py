"""A local server's guard and records, with real processes standing in for vLLM's (a server
process that starts an "engine core" child, as vLLM's API server does): the server's whole
group ends when the run that started it is SIGKILLed, or when the server itself exits; a later
start stops what a dead run left, by the token in the processes' environment only; each server
gets a cache directory no running server holds. Each test takes a few seconds (real vLLM
servers: tests/rollout/test_local_server_restarts.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from scalerl.rollout import server_records as records

# A "server": starts an "engine core" that ignores SIGTERM (a worker stuck in a collective), then
# waits; SERVER_EXIT=code makes it exit with that code after 1 s, its engine core left running.
SERVER = """
import os, signal, subprocess, sys, time
core = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(core.pid, flush=True)
if os.environ.get("SERVER_IGNORES_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("SERVER_EXIT"):
    time.sleep(1)
    os._exit(int(os.environ["SERVER_EXIT"]))
time.sleep(600)
"""

# The "run": starts the guard over SERVER (as rollout/local_servers.py does) and waits.
RUN = """
import os, subprocess, sys, time
guard = subprocess.Popen([sys.executable, "-m", "scalerl.rollout.server_guard", "--parent",
                          str(os.getpid()), "--grace", "2", "--", sys.executable, "-c",
                          sys.argv[1]], start_new_session=True)
print(guard.pid, flush=True)
sys.exit(guard.wait())
"""


def carriers_within(token: str, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := records.carriers(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def start_run(token: str, **env: str) -> subprocess.Popen:
    run = subprocess.Popen([sys.executable, "-c", RUN, SERVER], stdout=subprocess.PIPE,
                           text=True, env={**os.environ, records.TOKEN_VAR: token, **env})
    deadline = time.monotonic() + 60
    while len(records.carriers(token)) < 4 and time.monotonic() < deadline:  # run, guard,
        time.sleep(0.2)                                                       # server, core
    assert len(records.carriers(token)) == 4
    return run


def test_a_sigkilled_run_takes_its_servers_whole_group_with_it():
    token = f"test-{os.getpid()}-kill"
    run = start_run(token)
    run.kill()  # as torchrun does to a rank that outlived its grace
    run.wait()
    t = time.monotonic()
    # the guard sees its parent gone within 0.2 s, SIGTERMs the server (gone at once), then the
    # core, which ignores it, is SIGKILLed 2 s later (--grace)
    assert carriers_within(token, 15) == []
    assert time.monotonic() - t < 6


def test_a_server_that_ignores_sigterm_is_killed_and_its_guard_exits_too():
    token = f"test-{os.getpid()}-stuck"
    run = start_run(token, SERVER_IGNORES_TERM="1")
    run.kill()
    run.wait()
    # the server itself outlives the guard's SIGTERM: SIGKILLed with its group after --grace
    # (2 s), and the guard, its exit reaped, leaves too (the guard carries the token)
    assert carriers_within(token, 15) == []


def test_a_server_that_exits_takes_its_engine_core_along_and_says_how_it_ended():
    token = f"test-{os.getpid()}-exit"
    run = start_run(token, SERVER_EXIT="3")
    assert run.wait(30) == 3  # the guard's code is the server's
    assert carriers_within(token, 5) == []  # the core was stopped before the guard exited


def test_a_later_start_stops_only_the_leftovers_of_runs_that_are_gone(tmp_path):
    def leftover(token: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                env={**os.environ, records.TOKEN_VAR: token},
                                start_new_session=True)

    dead_run = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_run.wait()
    orphan, mine, stranger = leftover("orphan"), leftover("mine"), leftover("")
    try:
        time.sleep(0.5)  # their environments are readable once they exec'd
        # a record of a run that is gone, and one of this (live) process
        (tmp_path / f"{os.uname().nodename}-orphan.json").write_text(json.dumps({
            "token": "orphan", "owner": dead_run.pid, "owner_started": 1.0,
            "url": "http://127.0.0.1:1"}))
        records.write_record(tmp_path, "mine", {"url": "http://127.0.0.1:2"})
        (tmp_path / "otherhost-orphan.json").write_text("{}")  # another node's: not read
        lines = records.sweep(tmp_path, grace_s=5)
        assert len(lines) == 1 and "pid " + str(dead_run.pid) in lines[0]
        orphan.wait(10)  # stopped (and reaped by the sweep's psutil: this test is its parent)
        assert records.carriers("orphan") == []
        assert mine.poll() is None and stranger.poll() is None
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == sorted([f"{os.uname().nodename}-mine.json", "otherhost-orphan.json"])
    finally:
        for proc in (orphan, mine, stranger):
            proc.kill()
            proc.wait()


def test_each_server_gets_a_cache_directory_no_running_server_holds(tmp_path):
    first, lock1 = records.claim_cache_dir(tmp_path, 0)
    second, lock2 = records.claim_cache_dir(tmp_path, 0)  # held: the next one
    other, lock3 = records.claim_cache_dir(tmp_path, 1)
    assert [first.name, second.name, other.name] == ["scalerl-server-0", "scalerl-server-0.1",
                                                     "scalerl-server-1"]
    records.release(lock1)
    again, lock4 = records.claim_cache_dir(tmp_path, 0)  # free again: reused
    assert again == first
    for lock in (lock2, lock3, lock4):
        records.release(lock)
