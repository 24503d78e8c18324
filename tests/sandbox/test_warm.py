"""bwrap (warm workers): nothing one run leaves behind reaches the next run in that worker."""

from __future__ import annotations

import uuid

import pytest

from scalerl.sandbox import Limits
from scalerl.sandbox.bwrap_warm import BwrapWarmBackend

LEAVE_TRACES = r"""
import ctypes, os, sys
secret = sys.argv[1].encode()
for d in (".", "/tmp", "/dev/shm"):
    open(os.path.join(d, "trace"), "wb").write(secret)
os.makedirs("locked/inner"); os.chmod("locked", 0)
libc = ctypes.CDLL(None, use_errno=True)
shmid = libc.shmget(0x5ca1e, 4096, 0o1666)            # IPC_CREAT | 0666
msgid = libc.msgget(0x5ca1f, 0o1666)
print("shm", shmid, "msg", msgid)
if os.fork() == 0:                                       # a daemon that would keep the secret
    os.setsid()
    import time; time.sleep(1000)
"""

LOOK_FOR_TRACES = r"""
import ctypes, os
found = [p for p in ("trace", "/tmp/trace", "/dev/shm/trace", "locked") if os.path.lexists(p)]
libc = ctypes.CDLL(None, use_errno=True)
found += ["shm"] if libc.shmget(0x5ca1e, 0, 0) != -1 else []
found += ["msg"] if libc.msgget(0x5ca1f, 0) != -1 else []
found += [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
print(found)
"""


def _memory_of(pid: int) -> bytes:
    """Every readable byte of process `pid`, read from the host."""
    out = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if "r" not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                out.append(mem.read(hi - lo))
            except (OSError, ValueError, OverflowError):
                continue
    return b"".join(out)


@pytest.fixture
def one_worker(require_backend):
    require_backend("bwrap")
    backend = BwrapWarmBackend(max_workers=1)
    yield backend
    backend.close()


def test_next_run_sees_no_trace_of_the_previous_one(one_worker):
    secret = uuid.uuid4().hex
    first = one_worker.run(["python", "-c", LEAVE_TRACES, secret], stdin=secret.encode(),
                           files={"input.txt": secret.encode()})
    assert first.status == "ok", first
    assert b"shm -1" not in first.stdout and b"msg -1" not in first.stdout, first.stdout
    second = one_worker.run(["python", "-c", LOOK_FOR_TRACES])
    assert second.status == "ok", second
    assert second.stdout == b"[]\n", second.stdout


def test_pid1_never_holds_run_data(one_worker):
    """Each program is forked from PID 1, so PID 1's memory is what the next run inherits."""
    secret = uuid.uuid4().hex
    r = one_worker.run(["python", "-c", "import sys; print(len(sys.stdin.read()))", secret],
                       stdin=secret.encode() * 3, files={"in.txt": secret.encode()},
                       collect=("in.txt",))
    assert r.status == "ok" and r.extra == {"in.txt": secret.encode()}, r
    worker = next(iter(one_worker._all))
    memory = _memory_of(worker.pid1)
    assert len(memory) > 1 << 20, "read PID 1's memory from the host"
    assert secret.encode() not in memory


def test_pid1_cannot_be_read_or_traced_by_the_program(one_worker):
    code = ("import os\nout = []\nfor p in ('/proc/1/mem', '/proc/1/environ', '/proc/1/fd'):\n"
            "    try:\n        os.listdir(p) if p.endswith('fd') else open(p, 'rb').read(1)\n"
            "        out.append(p)\n    except OSError:\n        pass\nprint(out)")
    r = one_worker.run(["python", "-c", code])
    assert (r.status, r.stdout) == ("ok", b"[]\n"), r


def test_worker_is_reused_and_timeouts_do_not_break_it(one_worker):
    r1 = one_worker.run(["python", "-c", "import os; print(os.getppid())"])
    slow = one_worker.run(["python", "-c", "while True: pass"], limits=Limits(wall_s=0.5))
    r2 = one_worker.run(["python", "-c", "print('after')"])
    assert r1.status == "ok" and slow.status == "timeout" and r2.stdout == b"after\n"
    assert len(one_worker._all) == 1, "the same worker served all three runs"


def test_workers_outlive_the_thread_that_first_used_them(one_worker):
    """--die-with-parent follows the starting thread; workers must not die with a pool thread."""
    import threading

    first = []
    t = threading.Thread(target=lambda: first.append(one_worker.run(["python", "-c", "pass"])))
    t.start()
    t.join()
    again = one_worker.run(["python", "-c", "print(2)"])
    assert first[0].status == "ok" and (again.status, again.stdout) == ("ok", b"2\n"), again
    assert len(one_worker._all) == 1


def test_many_input_files_still_run(one_worker):
    files = {f"d/f{i}.txt": str(i).encode() for i in range(260)}
    r = one_worker.run(["python", "-c", "import os; print(len(os.listdir('d')))"], files=files)
    assert (r.status, r.stdout) == ("ok", b"260\n"), r
