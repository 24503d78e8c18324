"""The docker backend: warm, locked-down containers reused through `docker exec`.

Covered: containers with no network, memory = memory+swap, a pids limit, a CPU quota, a read-only
root, tmpfs /work and /tmp, uid 65534, every capability dropped, no-new-privileges, no docker
socket (no volumes at all); a pool of warm containers (a `docker run` costs seconds with vfs), one
run per container at a time; per run the supervisor empties /work and /tmp, runs the program, and
SIGKILLs every process of the sandbox uid before reporting; a container whose run hung, lost its
supervisor or left anything behind is removed and replaced. Not covered: per-run cgroups (limits are
per container, so containers are keyed by the limits they were made with), seccomp beyond docker's
default profile, user-namespace remapping of the daemon.
"""

from __future__ import annotations

import base64
import contextlib
import json
import marshal
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from scalerl.sandbox.base import Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.docker_image import IMAGE
from scalerl.sandbox.host_run import (
    SANDBOX_ENV,
    SUPERVISOR_SOURCE,
    Raw,
    build_result,
    check_relpath,
    classify,
    supervisor_cfg,
)

SANDBOX_USER = "65534:65534"
REAPER = ("import signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
          "while True:\n    signal.pause()")
"""PID 1 of each container: with SIGCHLD ignored the kernel reaps every orphan the moment it
exits or is re-parented to init (POSIX.1-2001, man 2 wait; kernel/exit.c do_notify_parent's
autoreap), so zombies never eat the pids limit nor linger for the leak checks; init cannot be
killed from inside its PID namespace. It was a `wait()` loop that slept 1 s whenever it had no
child: an orphan killed at the end of a run stayed a zombie for up to that second, and the
hostile-program suite's leak check waited for it (grandchild_stdout and daemon ~1 s slower)."""
LABEL = "scalerl.sandbox"
HOST_SLACK_S = 5.0
"""Beyond the wall limit, how long the host waits for the supervisor's report before recycling."""
DEFAULT_LIMITS = Limits()
DEFAULT_CONTAINERS = 2
"""Warm containers per backend instance (runs at once) when `SandboxConfig.workers` is None."""


def _client():
    import docker

    return docker.from_env(timeout=30)


def container_kwargs(limits: Limits) -> dict:
    """The `containers.run` arguments for a container serving runs under `limits`."""
    tmpfs_opts = f"size={limits.file_size_mb << 20},mode=1777"
    return dict(
        image=IMAGE, command=["python3", "-I", "-c", REAPER], detach=True, labels={LABEL: "1"},
        network_mode="none", mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m", pids_limit=limits.processes + 2,
        nano_cpus=1_000_000_000, read_only=True,
        tmpfs={"/work": tmpfs_opts, "/tmp": tmpfs_opts}, user=SANDBOX_USER,
        cap_drop=["ALL"], security_opt=["no-new-privileges"], working_dir="/work",
        environment=SANDBOX_ENV, ipc_mode="none", volumes={}, auto_remove=False)


@register_backend("docker")
class DockerBackend(Backend):
    """A pool of warm containers per limits key; see the module docstring."""

    def __init__(self, max_containers: int = DEFAULT_CONTAINERS) -> None:
        self.client = _client()
        self.max_containers = max_containers
        self._idle: dict[tuple, queue.SimpleQueue] = {}
        self._count: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_containers)
        self._all: set[str] = set()

    @classmethod
    def create(cls, workers: int | None = None) -> DockerBackend:
        return cls(max_containers=workers or DEFAULT_CONTAINERS)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            import docker.errors

            client = _client()
            client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure here means "not available", said why
            return False, f"docker daemon not reachable: {str(exc)[:200]}"
        try:
            client.images.get(IMAGE)
        except docker.errors.ImageNotFound:
            return False, f"image {IMAGE} missing: run `scalerl sandbox image`"
        return True, f"docker {client.version().get('Version', '?')} with image {IMAGE}"

    @staticmethod
    def _key(limits: Limits) -> tuple:
        return (limits.memory_mb, limits.processes, limits.file_size_mb)

    def _acquire(self, limits: Limits):
        key = self._key(limits)
        with self._lock:
            idle = self._idle.setdefault(key, queue.SimpleQueue())
        with contextlib.suppress(queue.Empty):
            return idle.get_nowait()
        kwargs = container_kwargs(limits)
        kwargs.pop("detach")
        container = self.client.containers.create(**kwargs)
        with self._lock:
            self._all.add(container.id)
        try:
            container.start()
        except Exception:
            self._discard(container)
            raise
        return container

    def _release(self, container, limits: Limits, healthy: bool) -> None:
        if healthy:
            self._idle[self._key(limits)].put(container)
            return
        threading.Thread(target=self._discard, args=(container,), daemon=True).start()

    def _discard(self, container) -> None:
        with contextlib.suppress(Exception):  # already gone is fine
            container.remove(force=True)
        with self._lock:
            self._all.discard(container.id)

    def leaks(self, grace_s: float = 1.0) -> str:
        """Processes in our idle containers besides their reaper (a run left something behind)."""
        deadline = time.monotonic() + grace_s
        while (found := self._extra_processes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"processes left in warm containers: {found}" if found else ""

    def _extra_processes(self) -> dict[str, int]:
        with self._lock:
            ids = set(self._all)
        counts: dict[str, int] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                text = Path(f"/proc/{pid}/cgroup").read_text()
            except OSError:
                continue
            for cid in ids:
                if cid in text:
                    counts[cid] = counts.get(cid, 0) + 1
        return {cid[:12]: n - 1 for cid, n in counts.items() if n > 1}

    def close(self) -> None:
        with self._lock:
            ids = list(self._all)
            self._all.clear()
            self._idle.clear()
        for cid in ids:
            with contextlib.suppress(Exception):
                self.client.api.remove_container(cid, force=True)

    def run(self, argv: list[str], *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits = DEFAULT_LIMITS, collect: tuple[str, ...] = ()) -> ExecResult:
        files = {check_relpath(k): v for k, v in (files or {}).items()}
        cfg = supervisor_cfg(argv, limits, cwd="/work", collect=collect, kill="all")
        cfg["reset"] = ["/work", "/tmp"]
        msg = marshal.dumps({"cfg": cfg, "stdin": bytes(stdin),
                             "files": {k: bytes(v) for k, v in files.items()}}, 4)
        with self._slots:
            try:
                container = self._acquire(limits)
            except Exception as exc:  # noqa: BLE001 - reported as the sandbox's own failure
                return ExecResult(status="sandbox_error", backend=self.name,
                                  detail=f"cannot start a container from {IMAGE}: {exc}")
            healthy = False
            try:
                result, healthy = self._exec(container, msg, limits)
            except Exception as exc:  # noqa: BLE001 - docker API failure: the sandbox's own error
                result = ExecResult(status="sandbox_error", backend=self.name,
                                    detail=f"docker exec failed: {type(exc).__name__}: {exc}")
            finally:
                self._release(container, limits, healthy)
        return result

    def _exec(self, container, msg: bytes, limits: Limits) -> tuple[ExecResult, bool]:
        api = self.client.api
        start = time.monotonic()
        exec_id = api.exec_create(container.id, ["python3", "-I", "-c", SUPERVISOR_SOURCE,
                                                 "framed", "-"], stdin=True, user=SANDBOX_USER,
                                  workdir="/work", environment=SANDBOX_ENV)["Id"]
        sock = api.exec_start(exec_id, socket=True)
        try:
            out, err, complete = _talk(sock._sock, msg, start + limits.wall_s + HOST_SLACK_S,
                                       4 * limits.output_bytes + (1 << 20))
        finally:  # the SocketIO holds an io-ref: the fd closes only when both are closed
            with contextlib.suppress(AttributeError, ValueError, OSError):
                sock._response.close()
            with contextlib.suppress(ValueError, OSError):
                sock.close()
        report = None
        if complete:
            with contextlib.suppress(ValueError):
                report = json.loads(out)
        raw = Raw(wall_s=time.monotonic() - start)
        if report is None:
            exit_code = api.exec_inspect(exec_id).get("ExitCode") if complete else None
            status = "sandbox_error" if exit_code != 137 else "runtime_error"
            detail = ("the program killed its supervisor (exit 137)" if exit_code == 137 else
                      f"no report from the supervisor (exit {exit_code}): {err[-300:]!r}")
            return ExecResult(status=status, backend=self.name, wall_s=raw.wall_s,
                              detail=detail), False
        raw.stdout += base64.b64decode(report["stdout"])
        raw.stderr += base64.b64decode(report["stderr"])
        raw.timed_out = report["outcome"] == "timeout"
        raw.output_over = report["outcome"] == "output_limit"
        oom = report.get("oom_kills", 0) > 0 or (
            report.get("exit_code") and b"MemoryError" in raw.stderr)
        status, detail = classify(report=report, timed_out=raw.timed_out,
                                  output_over=raw.output_over, oom=bool(oom), limits=limits,
                                  cpu_s=report["cpu_s"])
        return build_result(raw, report, status, detail, backend=self.name,
                            cpu_s=report["cpu_s"]), (report.get("survivors", 0) == 0
                                                     and not report.get("dirty"))


def _talk(sock: socket.socket, msg: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, bool]:
    """Send msg on the exec's stdin, read its multiplexed stdout/stderr until EOF or deadline."""
    bufs = {1: bytearray(), 2: bytearray()}
    try:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        sock.sendall(msg)
        sock.shutdown(socket.SHUT_WR)
        data = bytearray()
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            while len(data) >= 8:
                stream, size = data[0], struct.unpack(">I", data[4:8])[0]
                if len(data) < 8 + size:
                    break
                if len(bufs.get(stream, b"")) < cap:
                    bufs.setdefault(stream, bytearray()).extend(data[8:8 + size])
                del data[:8 + size]
        return bytes(bufs[1]), bytes(bufs[2]), True
    except (TimeoutError, OSError):
        return bytes(bufs[1]), bytes(bufs[2]), False
    finally:
        sock.close()
