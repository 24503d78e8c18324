"""Start the sandbox of one tool session (bwrap, docker, process) and talk frames to its REPL.

Covered: one long-lived sandbox per session running inside/repl.py, built from the backends'
own parts (bwrap_argv's walls and cgroup.RunCgroup for bwrap, docker.container_kwargs for docker,
host_run's rlimits and environment for all); a registry backend name -> launcher; the framing
(4-byte big-endian length + JSON) on the REPL's stdin/stdout with a deadline and a size cap;
killing the whole sandbox (cgroup kill, container removal, process group). Not covered: what a
call means (session.py), the REPL itself (inside/repl.py), the `process` backend's missing walls
(sandbox/process.py says what it does not stop).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scalerl.sandbox import bwrap_argv as walls
from scalerl.sandbox import cgroup
from scalerl.sandbox.base import Limits
from scalerl.sandbox.host_run import INSIDE_DIR, PYTHON, SANDBOX_ENV, rlimits_for

REPL_SOURCE = (INSIDE_DIR / "repl.py").read_text()
START_TIMEOUT_S = {"bwrap": 15.0, "process": 15.0, "docker": 60.0}
"""How long a sandbox may take to say `ready` before the start counts as failed."""


class StartFailed(RuntimeError):
    """The sandbox of a session could not start (the caller raises SessionFailed)."""


@dataclass
class Launched:
    """A started sandbox: its host process (stdin/stdout carry frames) and how to kill all of it."""

    proc: subprocess.Popen
    kill: Callable[[], None]
    """Kills every process of the sandbox and releases it (cgroup, container, temp dir)."""
    death: Callable[[], str] = lambda: ""
    """Why the sandbox died, when the backend can tell (the memory limit); '' otherwise."""
    pids: Callable[[], list[int]] = lambda: []
    """Host pids of the sandbox's processes (for leak checks)."""


def repl_argv(python: str, limits: Limits, call_s: float, capture_bytes: int, cwd: str,
              *, address_space: bool = False) -> list[str]:
    rlimits = rlimits_for(limits, address_space=address_space)
    rlimits.pop("cpu")  # the session lives for many calls: time is limited per call instead
    cfg = {"call_s": call_s, "capture_bytes": capture_bytes, "cwd": cwd, "tmp": "/tmp",
           "rlimits": rlimits}
    return [python, "-I", "-c", REPL_SOURCE, json.dumps(cfg)]


def _launch_bwrap(limits: Limits, call_s: float, capture_bytes: int) -> Launched:
    cg = cgroup.RunCgroup.create(limits.memory_mb, limits.processes + walls.RUN_OVERHEAD_PIDS,
                                 tag="session")
    procs = cg.procs_files
    cmd = ["/bin/sh", "-c", walls.JOIN_CGROUP, "sh", str(len(procs)), *procs,
           *walls.bwrap_argv(limits, {}, 0),
           *repl_argv(PYTHON, limits, call_s, capture_bytes, walls.WORK)]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=SANDBOX_ENV)
    except OSError:
        cg.remove()
        raise

    def kill() -> None:
        members = _suppressed_pids(cg.pids)
        cg.kill()
        _reap(proc)
        cg.remove()
        _wait_gone(members)  # a namespace's init leaves the cgroup before it is done exiting

    def death() -> str:
        with contextlib.suppress(OSError, ValueError):
            if cg.oom_killed():
                return f"the memory limit of {limits.memory_mb} MB was reached"
        return ""
    return Launched(proc, kill, death, lambda: _suppressed_pids(cg.pids))


def _launch_process(limits: Limits, call_s: float, capture_bytes: int) -> Launched:
    work = tempfile.mkdtemp(prefix="scalerl-session-")
    cmd = repl_argv(PYTHON, limits, call_s, capture_bytes, work, address_space=True)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=SANDBOX_ENV, cwd=work,
                            start_new_session=True)

    def kill() -> None:  # its session: itself and what stayed in it (setsid daemons escape)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _reap(proc)
        shutil.rmtree(work, ignore_errors=True)
    return Launched(proc, kill, pids=lambda: _group_pids(proc.pid))


def _launch_docker(limits: Limits, call_s: float, capture_bytes: int) -> Launched:
    from scalerl.sandbox.docker import SANDBOX_USER, _client, container_kwargs

    docker = shutil.which("docker")
    if docker is None:
        raise StartFailed("the docker CLI is not on PATH (the session talks to its container "
                          "through `docker exec -i`)")
    client = _client()
    kwargs = container_kwargs(limits)
    kwargs.pop("detach")
    container = client.containers.create(**kwargs)

    def kill() -> None:  # SIGKILL first: faster than a forced removal of a running container
        with contextlib.suppress(Exception):  # already gone or stopped is fine
            client.api.kill(container.id)
            client.api.wait(container.id, timeout=10)
        with contextlib.suppress(Exception):
            client.api.remove_container(container.id, force=True)
        _reap(proc)

    try:
        container.start()
        cmd = [docker, "exec", "-i", "-u", SANDBOX_USER, "-w", "/work", container.id,
               *repl_argv("python3", limits, call_s, capture_bytes, "/work")]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except Exception:
        with contextlib.suppress(Exception):
            client.api.remove_container(container.id, force=True)
        raise

    def death() -> str:  # the container's reaper (PID 1) outlives the interpreter
        pids = _container_pids(container.id)
        if pids and _oom_kills(pids[0]):
            return f"the memory limit of {limits.memory_mb} MB was reached"
        return ""
    return Launched(proc, kill, death, lambda: _container_pids(container.id))


def _oom_kills(pid: int) -> int:
    """OOM kills in the memory cgroup of host process `pid` (0 when that cannot be read)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if "memory" in ctrls.split(","):
                events = cgroup.ROOT / "memory" / path.lstrip("/") / "memory.oom_control"
            elif ctrls == "" and cgroup.cgroup_version() == 2:
                events = cgroup.ROOT / path.lstrip("/") / "memory.events"
            else:
                continue
            fields = dict(row.split() for row in events.read_text().splitlines())
            return int(fields.get("oom_kill", 0))
    return 0


LAUNCHERS: dict[str, Callable[[Limits, float, int], Launched]] = {
    "bwrap": _launch_bwrap, "bwrap-cold": _launch_bwrap, "docker": _launch_docker,
    "process": _launch_process}
"""backend name -> how a session's sandbox starts there (a session is always a fresh sandbox, so
bwrap and bwrap-cold are the same thing here)."""


def _reap(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            f.close()


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    """Return once none of `pids` is running (zombies count as gone), or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := _running(pids)) and time.monotonic() < deadline:
        time.sleep(0.005)
        pids = left


def _running(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(pid)
    return out


def _suppressed_pids(fn: Callable[[], list[int]]) -> list[int]:
    try:
        return fn()
    except OSError:
        return []


def _group_pids(pgid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    out.append(int(pid))
    return out


def _container_pids(cid: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if cid in Path(f"/proc/{pid}/cgroup").read_text():
                    out.append(int(pid))
    return out


@dataclass
class Sandbox:
    """One running REPL in its sandbox; not thread-safe (its PythonSession serialises calls)."""

    backend: str
    launched: Launched
    max_frame: int
    buf: bytearray = field(default_factory=bytearray)
    _killer: Callable[[], object] | None = None

    @classmethod
    def start(cls, backend: str, limits: Limits, call_s: float, capture_bytes: int) -> Sandbox:
        """Launch, wait for the REPL's `ready`; StartFailed (saying why) when it does not come."""
        try:
            launched = LAUNCHERS[backend](limits, call_s, capture_bytes)
        except StartFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to launch is the sandbox's own
            raise StartFailed(f"{backend} sandbox did not start: {type(exc).__name__}: "
                              f"{exc}") from exc
        box = cls(backend, launched, max_frame=capture_bytes * 2 + (64 << 10))
        box._killer = weakref.finalize(box, launched.kill)  # dropped without close(): killed too
        reply = box.receive(time.monotonic() + START_TIMEOUT_S[backend])
        if not (isinstance(reply, dict) and reply.get("ready")):
            err = box.stderr_tail()
            box.kill()
            raise StartFailed(f"{backend} sandbox did not start: the interpreter sent "
                              f"{reply!r} instead of ready; stderr: {err!r}")
        return box

    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode()
        stdin = self.launched.proc.stdin
        stdin.write(len(data).to_bytes(4, "big") + data)
        stdin.flush()

    def receive(self, deadline: float) -> dict | str:
        """The next frame, or why none came: 'eof' (the REPL died), 'deadline', 'bad frame'."""
        fd = self.launched.proc.stdout.fileno()
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                frame = self._frame()
                if frame is not None:
                    return frame
                left = deadline - time.monotonic()
                if left <= 0:
                    return "deadline"
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    return "eof"
                if not chunk:
                    return "eof"
                self.buf += chunk

    def _frame(self) -> dict | str | None:
        if len(self.buf) < 4:
            return None
        size = int.from_bytes(self.buf[:4], "big")
        if size > self.max_frame:
            return "bad frame"
        if len(self.buf) < 4 + size:
            return None
        body = bytes(self.buf[4:4 + size])
        del self.buf[:4 + size]
        try:
            frame = json.loads(body)
        except ValueError:
            return "bad frame"
        return frame if isinstance(frame, dict) else "bad frame"

    def exit_detail(self) -> str:
        """How the sandbox's host process ended, with the backend's own reason when it has one."""
        proc = self.launched.proc
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        reason = self.launched.death()
        code = proc.returncode
        if code is None:
            how = "stopped answering"
        elif code > 128 and code - 128 in signal.Signals._value2member_map_:
            how = f"was killed by signal {code - 128} ({signal.Signals(code - 128).name})"
        elif code < 0:
            how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            how = f"exited with status {code}"
        return f"{how}; {reason}" if reason else how

    def stderr_tail(self) -> str:
        fd = self.launched.proc.stderr.fileno()
        os.set_blocking(fd, False)
        try:
            return os.read(fd, 1 << 14).decode("utf-8", "replace")[-500:]
        except (BlockingIOError, OSError):
            return ""

    def kill(self) -> None:
        """Kill the whole sandbox; idempotent."""
        if self._killer is not None:
            self._killer()
        else:
            self.launched.kill()
