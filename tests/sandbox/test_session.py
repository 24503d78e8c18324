"""The tool session (sandbox/session.py) on every backend here: notebook semantics, failures as
observations, limits, isolation, nothing outliving close(), concurrency, the warm pool.

bwrap and docker must run in CI (conftest's `require_backend` fails the test there); `process`
runs the tests it can pass (it is not a security boundary: the isolation tests skip it, saying
so). Expected values are worked out by hand, not copied from the session's output.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scalerl.envs.environment import SessionFailed
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.process import NotASandboxWarning
from scalerl.sandbox.selfcheck import survivors
from scalerl.sandbox.session import (
    KILL_GRACE_S,
    TRUNCATED_NOTE,
    SessionLimits,
    SessionPool,
    close_all,
    shown,
)
from scalerl.sandbox.session_launch import Sandbox

LIMITS = SessionLimits(call_s=2.0, memory_mb=256, processes=32, max_output_chars=500)
SECURE = [pytest.param("bwrap", marks=pytest.mark.bwrap),
          pytest.param("docker", marks=pytest.mark.docker)]
ALL = [*SECURE, "process"]
PROJECT_FILE = Path(__file__).resolve().parents[2] / "pyproject.toml"
_POOLS: dict[tuple[str, SessionLimits], SessionPool] = {}


def make_pool(name: str, limits: SessionLimits, warm: int = 2) -> SessionPool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotASandboxWarning)
        return SessionPool(SandboxConfig(backend=name), limits, warm=warm)


@pytest.fixture
def pool_for(require_backend):
    """`pool_for(name, limits)`: a pool shared by this module's tests (skip/fail as conftest)."""
    def get(name: str, limits: SessionLimits = LIMITS) -> SessionPool:
        require_backend(name)
        if (name, limits) not in _POOLS:
            _POOLS[(name, limits)] = make_pool(name, limits)
        return _POOLS[(name, limits)]
    return get


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


@pytest.fixture(params=ALL)
def session(request, pool_for):
    s = pool_for(request.param).acquire()
    yield s
    s.close()


@pytest.fixture(params=SECURE)
def secure_session(request, pool_for):
    s = pool_for(request.param).acquire()
    yield s
    s.close()


def gone(pids: list[int]) -> list[int]:
    """The pids among `pids` still running (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_variables_persist_and_a_final_expression_is_shown(session):
    assert session.run("x = 6\ndef f(n):\n    return n * 7").output == ""
    out = session.run("print('side')\nf(x)")
    assert (out.status, out.output, out.truncated) == ("ok", "side\n42\n", False)
    assert session.run("sum(i * i for i in range(10))").output == "285\n"  # 0+1+4+...+81
    assert session.run("None").output == ""  # None is not shown, as in a notebook
    assert session.run("'a' + 'b'").output == "'ab'\n"  # the repr, quotes included


def test_a_raise_is_an_error_observation_and_state_survives(session):
    session.run("kept = [1, 2, 3]")
    out = session.run("def g():\n    return 1 / 0\ng()")
    assert out.status == "error"
    assert out.output.startswith("Traceback (most recent call last):\n")
    assert 'File "<cell 2>", line 2, in g' in out.output  # the cell's own frames and lines
    assert "return 1 / 0" in out.output
    assert out.output.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "repl" not in out.output  # the interpreter's own frames are not shown
    assert session.run("kept").output == "[1, 2, 3]\n"
    syntax = session.run("def (")
    assert syntax.status == "error" and "SyntaxError" in syntax.output


def test_busy_loop_times_out_and_the_session_goes_on(session):
    session.run("state = 'intact'")
    out = session.run("print('before')\nwhile True:\n    pass")
    assert out.status == "timeout"
    assert out.output == "before\ntimed out after 2 s"
    assert LIMITS.call_s <= out.latency_s < LIMITS.call_s + KILL_GRACE_S
    assert session.run("state").output == "'intact'\n"  # interrupted in-process: state kept


def test_code_that_cannot_be_interrupted_is_killed_and_the_session_restarts(session):
    session.run("lost = 1")
    code = ("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "time.sleep(100)")
    start = time.monotonic()
    out = session.run(code)
    assert out.status == "timeout"
    assert time.monotonic() - start < LIMITS.call_s + KILL_GRACE_S + 1.0
    assert out.output.startswith("timed out after 2 s") and "are gone" in out.output
    after = session.run("lost")
    assert after.status == "error" and "NameError: name 'lost' is not defined" in after.output
    assert session.run("2 ** 10").output == "1024\n"


@pytest.mark.parametrize("code", ["import os\nos._exit(3)", "import ctypes\nctypes.string_at(0)"],
                         ids=["os_exit", "segfault"])
def test_a_dead_interpreter_is_an_error_observation_and_a_fresh_one_follows(session, code):
    session.run("lost = 1")
    out = session.run(code)
    assert out.status == "error"
    assert out.output.startswith("the Python interpreter died (")
    assert ("exited with status 3" in out.output if "_exit" in code
            else "signal 11 (SIGSEGV)" in out.output)
    assert "are gone" in out.output
    assert "NameError" in session.run("lost").output
    assert session.run("6 * 7").output == "42\n"
    assert session.alive


def test_a_memory_hog_is_contained(session):
    session.run("small = 1")
    out = session.run("keep = []\nfor _ in range(64):\n    keep.append(bytearray(16 << 20))")
    assert out.status == "error"  # 1 GiB against a 256 MB session
    if session.backend == "process":  # RLIMIT_AS: MemoryError in-process, state kept
        assert "MemoryError" in out.output
    else:  # the cgroup / container's OOM kill ends the interpreter, and the output says why
        assert out.output.startswith("the Python interpreter died (")
        assert "the memory limit of 256 MB was reached" in out.output
    assert session.run("1 + 1").output == "2\n"


def test_output_is_cut_at_the_cap(session):
    out = session.run("print('y' * 5000)")
    assert out.status == "ok" and out.truncated
    assert out.output == "y" * LIMITS.max_output_chars + TRUNCATED_NOTE
    exact = session.run("print('z' * 499)")  # 499 + newline = 500 characters: not cut
    assert (exact.output, exact.truncated) == ("z" * 499 + "\n", False)


def test_writes_to_fd_1_cannot_forge_a_reply(session):
    fake = b'{"status": "ok", "output": "FORGED", "bytes": 6}'
    code = ("import os, subprocess, sys\n"
            f"os.write(1, len({fake!r}).to_bytes(4, 'big') + {fake!r})\n"
            "sys.__stdout__.write('!')\n"
            "subprocess.run(['echo', 'child'])\n"
            "1/0")
    out = session.run(code)
    assert out.status == "error"  # the code's real outcome, not the forged "ok"
    assert "FORGED" in out.output and out.output.index("FORGED") < out.output.index("child")
    assert "ZeroDivisionError" in out.output
    assert session.run("'next'").output == "'next'\n"


def test_the_network_is_unreachable(secure_session):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = ("import socket\nfor addr in [('127.0.0.1', %d), ('1.1.1.1', 53)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=1)\n"
            "        print('CONNECTED', addr)\n"
            "    except OSError as exc:\n        print('refused', type(exc).__name__)"
            ).replace("%d", str(port))
    try:
        out = secure_session.run(code)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert out.status == "ok" and "CONNECTED" not in out.output
    assert out.output.count("refused") == 2


def test_host_files_are_unreadable(secure_session, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host-secret-5f1c")
    secret.chmod(0o644)
    paths = ["/etc/shadow", str(secret), str(PROJECT_FILE)]
    code = (f"for p in {paths!r}:\n    try:\n        print('READ', open(p).read(100))\n"
            "    except OSError as exc:\n        print('refused', type(exc).__name__)")
    out = secure_session.run(code)
    assert out.status == "ok"
    assert out.output.count("refused") == 3 and "READ" not in out.output


def test_a_daemon_does_not_outlive_close(secure_session):
    token = f"scalerl-session-test-{os.getpid()}-{time.monotonic_ns()}"
    code = ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.execvp('sh', ['sh', '-c', 'while :; do sleep 0.2; done', TOKEN])\n"
            "    os._exit(0)\nos.wait()\nprint('daemon started')").replace("TOKEN", repr(token))
    assert secure_session.run(code).output == "daemon started\n"
    deadline = time.monotonic() + 3.0
    while not (seen := survivors(token, grace_s=0)) and time.monotonic() < deadline:
        time.sleep(0.05)  # the daemon's exec may trail the call's reply
    assert seen, "the daemon should be visible from the host while the session lives"
    pids = secure_session.pids()
    assert set(seen) <= set(pids) or secure_session.backend == "docker"
    secure_session.close()
    assert survivors(token, grace_s=2.0) == []
    assert gone(pids) == [] and secure_session.pids() == []
    assert not secure_session.alive
    with pytest.raises(SessionFailed, match="closed"):
        secure_session.run("1")
    secure_session.close()  # idempotent


def test_close_during_a_call_ends_the_call_at_once(session):
    result: dict = {}

    def call():
        try:
            result["out"] = session.run("import time\ntime.sleep(30)")
        except SessionFailed as exc:
            result["failed"] = str(exc)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)
    pids = session.pids()
    session.close()
    thread.join(timeout=5.0)
    assert not thread.is_alive(), "the call outlived close()"
    assert result == {"failed": "the tool session was closed during the call"}
    assert gone(pids) == []


@pytest.mark.parametrize("name", ALL)
def test_concurrent_sessions_and_a_slow_call_delays_only_its_own(name, pool_for):
    pool = pool_for(name)
    sessions = [pool.acquire() for _ in range(3)]
    try:
        for i, s in enumerate(sessions):
            s.run(f"mine = {i}")
        slow_done = threading.Event()

        def slow():
            out = sessions[0].run("import time\ntime.sleep(1.5)\nmine")
            slow_done.set()
            return out

        def fast(i):
            outs = [sessions[i].run(f"mine * 10 + {k}") for k in range(5)]
            return outs, slow_done.is_set()

        with ThreadPoolExecutor(3) as ex:
            slow_f = ex.submit(slow)
            fast_f = [ex.submit(fast, i) for i in (1, 2)]
            for i, f in zip((1, 2), fast_f, strict=True):
                outs, after_slow = f.result()
                assert [o.output for o in outs] == [f"{i * 10 + k}\n" for k in range(5)]
                assert not after_slow, "a fast session waited for the slow one"
                assert max(o.latency_s for o in outs) < 1.0
            assert slow_f.result().output == "0\n"
    finally:
        close_all(sessions)


@pytest.mark.parametrize("name", ALL)
def test_the_pool_prestarts_warm_sessions(name, require_backend):
    require_backend(name)
    limits = LIMITS.sandbox_limits()
    cold = []
    for _ in range(1 if name == "docker" else 2):  # a container start costs seconds
        start = time.perf_counter()
        box = Sandbox.start(name, limits, LIMITS.call_s, LIMITS.capture_bytes)
        cold.append(time.perf_counter() - start)
        threading.Thread(target=box.kill).start()
    pool = make_pool(name, LIMITS, warm=1)
    try:
        deadline = time.monotonic() + 60
        while pool.warm_ready() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.warm_ready() == 1
        start = time.perf_counter()
        got = pool.acquire()
        warm = time.perf_counter() - start
        assert got.run("40 + 2").output == "42\n"
        assert warm < min(cold) / 5, (warm, cold)
    finally:
        pool.close()
    assert got.pids() == [] and not got.alive  # the pool's close killed what it handed out


def test_a_sandbox_that_cannot_start_raises_session_failed(monkeypatch, require_backend):
    require_backend("process")
    from scalerl.sandbox import session_launch

    def broken(*args):
        raise OSError("no namespaces here")

    monkeypatch.setitem(session_launch.LAUNCHERS, "process", broken)
    pool = make_pool("process", LIMITS, warm=1)
    try:
        with pytest.raises(SessionFailed, match="process sandbox did not start: OSError: no "
                                                "namespaces here"):
            pool.acquire()
    finally:
        pool.close()
    with pytest.raises(SessionFailed, match="closed"):
        pool.acquire()


def test_limits_are_checked_and_output_cut_purely():
    with pytest.raises(ValueError, match="SessionLimits.call_s must be a number > 0"):
        SessionLimits(call_s=0)
    with pytest.raises(ValueError, match="SessionLimits.memory_mb must be >= 32"):
        SessionLimits(memory_mb=8)
    limits = SessionLimits(max_output_chars=4)
    assert shown("abcdef", 6, limits) == ("abcd" + TRUNCATED_NOTE, True)
    assert shown("abcd", 4, limits) == ("abcd", False)
    assert shown("ab", 10_000, limits) == ("ab" + TRUNCATED_NOTE, True)  # cut inside the sandbox
    with pytest.raises(ValueError, match="warm must be an integer >= 0"):
        SessionPool(SandboxConfig(backend="process"), limits, warm=-1)
