"""Isolation details the probes do not show directly: host uid, container settings, limits."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from scalerl.sandbox import Limits
from scalerl.sandbox.selfcheck import survivors


def _host_uids_while_running(backend, token: str) -> set[int]:
    seen: set[int] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            for pid in survivors(token, grace_s=0):
                try:
                    if os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid"):
                        continue  # the host-side prelude (sh, setpriv) before bwrap starts
                    uid_line = next(line for line in Path(f"/proc/{pid}/status").read_text()
                                    .splitlines() if line.startswith("Uid:"))
                    seen.add(int(uid_line.split()[1]))
                except (OSError, StopIteration):
                    pass
            time.sleep(0.01)

    t = threading.Thread(target=watch)
    t.start()
    try:
        backend.run(["sh", "-c", "sleep 0.6", token])  # $0 = token: findable in host /proc
    finally:
        done.set()
        t.join()
    return seen


@pytest.mark.parametrize("name", ["bwrap", "bwrap-cold"])
def test_bwrap_program_is_not_root_on_the_host(require_backend, name):
    """bwrap started by root would map the sandbox uid to host root; we start it as nobody."""
    backend = require_backend(name)
    uids = _host_uids_while_running(backend, f"uid-probe-{os.getpid()}")
    assert uids == {65534}, uids


@pytest.mark.parametrize("name", ["bwrap", "bwrap-cold"])
def test_bwrap_memory_limit_holds_for_a_forked_child(require_backend, name):
    backend = require_backend(name)
    code = ("import os\nif os.fork() == 0:\n    x = bytearray(400 << 20)\n    os._exit(0)\n"
            "os.wait()\nprint('parent ok')")
    r = backend.run(["python", "-c", code], limits=Limits(memory_mb=128))
    assert r.status == "memory_limit", r


def test_docker_containers_are_locked_down(require_backend):
    backend = require_backend("docker")
    r = backend.run(["python", "-c", "print(1)"])
    assert r.status == "ok"
    sizes = set()
    for cid in backend._all:
        cfg = backend.client.api.inspect_container(cid)
        host = cfg["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["Memory"] == host["MemorySwap"] > 0, "memory = memory + swap"
        assert not host.get("Binds") and not cfg["Mounts"], "no volumes, so no docker socket"
        assert cfg["Config"]["User"] == "65534:65534"
        assert set(host["Tmpfs"]) == {"/work", "/tmp"}
        sizes.add((host["Memory"], host["PidsLimit"]))
    assert (Limits().memory_mb << 20, Limits().processes + 2) in sizes


def test_docker_work_dir_is_reset_between_runs(require_backend):
    backend = require_backend("docker")
    first = backend.run(["python", "-c", "open('left.txt', 'w').write('x'); import os; "
                         "os.makedirs('d/e'); os.chmod('d', 0)"], files={"a.py": b""})
    assert first.status == "ok", first
    second = backend.run(["python", "-c", "import os; print(sorted(os.listdir('.')), "
                          "sorted(os.listdir('/tmp')))"])
    assert second.stdout == b"[] []\n", second
