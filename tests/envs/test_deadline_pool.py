"""The deadline-enforcing process pool: outcomes, deadlines, killed workers, no orphans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from scalerl.envs.deadline_pool import Pool


@pytest.fixture(scope="module")
def pool():
    p = Pool(2)
    yield p
    p.shutdown()


def test_results_come_back_in_input_order(pool):
    outcomes = pool.run_many(divmod, [(7, 2), (9, 4), (1, 1)], timeout_s=30)
    assert [o.status for o in outcomes] == ["ok", "ok", "ok"]
    assert [o.value for o in outcomes] == [(3, 1), (2, 1), (1, 0)]


def test_work_runs_in_other_processes(pool):
    pids = {o.value for o in pool.run_many(os.getpid, [()] * 6, timeout_s=30)}
    assert os.getpid() not in pids
    assert pids <= set(pool.worker_pids())


def test_an_exception_is_an_error_outcome_with_its_message(pool):
    outcome = pool.run(int, ("not a number",), timeout_s=30)
    assert outcome.status == "error"
    assert outcome.detail.startswith("ValueError: invalid literal for int()")


def test_deadline_kills_a_stuck_worker_and_replaces_it(pool):
    replaced = pool.replaced
    t0 = time.monotonic()
    outcome = pool.run(time.sleep, (60,), timeout_s=0.5)
    assert outcome.status == "timeout"
    assert "killed and replaced" in outcome.detail
    assert 0.5 <= outcome.latency_s < 5
    assert time.monotonic() - t0 < 10
    assert pool.replaced == replaced + 1
    assert pool.run(divmod, (5, 2), timeout_s=30).value == (2, 1)


def test_other_calls_finish_while_one_worker_is_stuck(pool):
    t0 = time.monotonic()
    outcomes = pool.run_many(time.sleep, [(60,)] + [(0.01,)] * 20, timeout_s=3)
    elapsed = time.monotonic() - t0
    assert outcomes[0].status == "timeout"
    assert [o.status for o in outcomes[1:]] == ["ok"] * 20
    # All 20 short calls ran on the free worker during the stuck one's 3 s, not after it.
    assert sum(o.latency_s for o in outcomes[1:]) < 3
    assert elapsed < 6


def pid_for(key: str) -> int:
    """Runs in a worker: which process ran the call for `key`."""
    time.sleep(0.01)
    return os.getpid()


def test_calls_with_the_same_affinity_key_stay_on_one_worker(pool):
    args = [(f"k{i % 4}",) for i in range(80)]  # 4 keys, interleaved
    outcomes = pool.run_many(pid_for, args, timeout_s=30, affinity=lambda a: a[0])
    pairs = {(a[0], o.value) for a, o in zip(args, outcomes, strict=True)}
    assert {o.status for o in outcomes} == {"ok"}
    assert len({pid for _, pid in pairs}) == 2  # both workers were used
    # Each key on one worker, except that at the end one may share the last key rather than idle.
    assert len(pairs) <= 5


def test_concurrent_callers_share_the_pool(pool):
    results: dict[str, list] = {}

    def call(name: str, arg: float) -> None:
        results[name] = pool.run_many(time.sleep, [(arg,)], timeout_s=30)

    threads = [threading.Thread(target=call, args=(f"t{i}", 0.2)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["t0", "t1", "t2", "t3"]
    assert all(r[0].status == "ok" for r in results.values())


def announce_then_sleep(path: str, seconds: float) -> None:
    """Runs in a worker: write our pid to `path` (the call has started), then sleep."""
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)


def test_a_worker_killed_mid_call_gives_an_error_and_is_replaced(pool, tmp_path):
    flag = tmp_path / "started"
    holder: dict[str, object] = {}
    thread = threading.Thread(target=lambda: holder.update(
        out=pool.run(announce_then_sleep, (str(flag), 60), timeout_s=30)))
    thread.start()
    deadline = time.monotonic() + 20
    while not (flag.exists() and flag.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(flag.read_text())
    assert pid in pool.worker_pids()
    os.kill(pid, 9)
    thread.join(30)
    outcome = holder["out"]
    assert outcome.status == "error"
    assert f"pid {pid} died mid-check (killed by signal SIGKILL)" in outcome.detail
    assert pid not in pool.worker_pids()
    assert pool.run(divmod, (9, 2), timeout_s=30).value == (4, 1)


def test_workers_do_not_outlive_a_killed_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time
        from scalerl.envs.deadline_pool import Pool
        if __name__ == "__main__":
            p = Pool(2)
            p.run_many(time.sleep, [(0.05,), (0.05,)], 30)
            print(" ".join(map(str, p.worker_pids())), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_forked_child_starts_its_own_workers(pool):
    parent_pids = set(pool.run_many(os.getpid, [()] * 4, timeout_s=30) and pool.worker_pids())
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: must not use (or kill) the parent's workers
        try:
            pids = {o.value for o in pool.run_many(os.getpid, [()] * 4, timeout_s=30)}
            os.write(write, json.dumps(sorted(pids)).encode())
            pool.shutdown()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child_pids = set(json.loads(f.read()))
    os.waitpid(child, 0)
    assert child_pids and not child_pids & parent_pids
    assert set(pool.worker_pids()) == parent_pids
    assert pool.run(divmod, (7, 2), timeout_s=30).value == (3, 1)


def test_bad_sizes_and_start_methods_are_refused():
    with pytest.raises(ValueError, match="pool size must be >= 1"):
        Pool(-1)
    with pytest.raises(ValueError, match="use 'forkserver' or 'spawn'"):
        Pool(1, start_method="fork")


CALLER = """
print("script ran", flush=True)
from scalerl.envs.deadline_pool import Pool

def own(x):
    return x

pool = Pool(1, start_method=METHOD)
print(pool.run(divmod, (7, 2), 60), flush=True)
print(pool.run(own, (1,), 60).detail, flush=True)
"""
"""A caller's script as a notebook's cell would be: no `if __name__ == "__main__":` guard."""


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
@pytest.mark.parametrize("fed_on_stdin", [False, True], ids=["file", "stdin"])
def test_workers_never_run_the_callers_script(tmp_path, method, fed_on_stdin):
    """Workers start from the pool's module: the script runs once (multiprocessing would re-run
    it in each worker), and fed on stdin (`python -`, main path `<stdin>`) its workers start
    (they died opening `<stdin>`). A function of the script cannot be sent: one clear error."""
    code = f"METHOD = {method!r}\n" + CALLER
    script = tmp_path / "caller.py"
    script.write_text(code)
    argv = [sys.executable, "-"] if fed_on_stdin else [sys.executable, str(script)]
    proc = subprocess.run(argv, input=code if fed_on_stdin else None, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "script ran" and lines.count("script ran") == 1, proc.stdout
    assert lines[1].startswith("Outcome(status='ok', value=(3, 1)"), proc.stdout
    assert "pool functions must be importable from a module, not defined in the caller's " \
           "__main__" in lines[2], proc.stdout
