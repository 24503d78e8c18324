"""The `bwrap` backend (the default): warm bubblewrap workers, one run at a time, wiped between.

Same walls as `bwrap-cold` (all namespaces, host uid 65534, read-only root, cgroup limits, rlimits,
the environment allowlist) but a worker's namespaces, tmpfs mounts and cgroup outlive a run, so a
run costs a fork instead of bwrap + interpreter start-up. Between runs (see inside/warm_init.py,
PID 1 of each worker)
every process but PID 1 is SIGKILLed and reaped, the host checks the cgroup holds only the worker
itself, then /work, /tmp, /dev/shm, /dev/mqueue, SysV IPC and the user keyring are emptied; any
doubt (no report, leftovers, a failed wipe, a timeout) discards the worker. Each program is forked
from an interpreter that never held another run's data.
Not covered (what a `bwrap-cold` run gives and this does not): fresh namespaces per run, so
kernel state we do not wipe (e.g. netns socket buffers in TIME_WAIT, the kernel keyring quota)
is shared by the runs of one worker; memory and pids limits count the worker's PID 1 (~10 MB,
1 pid) as in `bwrap-cold`. CPU seconds come from the program's own rusage.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import queue
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from scalerl.sandbox import bwrap_argv as walls
from scalerl.sandbox import cgroup
from scalerl.sandbox.base import Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.host_run import (
    PYTHON,
    SANDBOX_ENV,
    Raw,
    build_result,
    check_relpath,
    classify,
    compiled_inside_dir,
    memfd_with,
    read_capped,
    supervisor_cfg,
)

DEFAULT_LIMITS = Limits()
MAX_FILES = 200
"""More input files than this go to a cold `bwrap-cold` run (SCM_RIGHTS carries ~250 fds)."""
REPORT_SLACK_S = 3.0
"""After a kill, how long the worker may take to report before it is discarded."""


class WorkerGone(RuntimeError):
    """The worker died or misbehaved; the run is a sandbox error and the worker is discarded."""


class _Worker:
    """One long-lived sandbox: bwrap + inside/warm_init.py as PID 1, in its own cgroup."""

    def __init__(self, limits: Limits) -> None:
        pyc_dir = compiled_inside_dir()
        if pyc_dir is None:
            raise WorkerGone("no compiled inside/ directory (see host_run.compiled_inside_dir)")
        self.cg = cgroup.RunCgroup.create(limits.memory_mb,
                                          limits.processes + walls.RUN_OVERHEAD_PIDS, tag="warm")
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_r, info_w = os.pipe()
        extra = ("--ro-bind", pyc_dir, walls.INSIDE_MOUNT, "--mqueue", "/dev/mqueue",
                 "--info-fd", str(info_w))
        procs = self.cg.procs_files
        cmd = ["/bin/sh", "-c", walls.JOIN_CGROUP, "sh", str(len(procs)), *procs,
               *walls.bwrap_argv(limits, {}, 0, extra), PYTHON, "-I",
               f"{walls.INSIDE_MOUNT}/warm_init.pyc", "serve", str(child.fileno())]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=SANDBOX_ENV,
                                         pass_fds=(child.fileno(), info_w))
        finally:
            child.close()
            os.close(info_w)
        try:
            with os.fdopen(info_r, "rb") as info:
                self.pid1 = json.loads(info.read().split(b"}")[0] + b"}")["child-pid"]
            with contextlib.suppress(OSError):  # needs CAP_SYS_RESOURCE: best effort
                _write_text(f"/proc/{self.pid1}/oom_score_adj", "-1000")
            self.expect(b"ready", 10.0)
        except (OSError, ValueError, KeyError, WorkerGone) as exc:
            self.destroy()
            raise WorkerGone(f"warm worker did not start: {exc}") from exc

    def expect(self, what: bytes, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            got = self.sock.recv(4096)
        except OSError as exc:
            raise WorkerGone(f"no {what!r} from the worker: {exc}") from exc
        if got != what:
            raise WorkerGone(f"worker said {got[:200]!r}, expected {what!r}")

    def strangers(self) -> list[int]:
        """Processes in the worker's cgroup besides bwrap and PID 1 (none between runs)."""
        return [p for p in self.cg.pids() if p not in (self.proc.pid, self.pid1)]

    def kill_run(self) -> None:
        """Freeze the worker, SIGKILL everything of the current run, thaw."""
        self.cg._set_frozen(True)
        for pid in self.strangers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.cg._set_frozen(False)

    def destroy(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.cg.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.cg.remove()


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read_collected(pid1: int, names: tuple[str, ...], cap: int) -> dict[str, bytes]:
    """Read collected files from outside, walking the sandbox tree without following links."""
    out = {}
    root = os.open(f"/proc/{pid1}/root/work", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in names:
            parts = check_relpath(name).split("/")
            fds = [root]
            try:
                for part in parts[:-1]:
                    fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                       dir_fd=fds[-1]))
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                             dir_fd=fds[-1])
                fds.append(fd)
                if os.path.stat.S_ISREG(os.fstat(fd).st_mode):
                    out[name] = os.read(fd, cap)  # regular tmpfs file: one read gets it all
            except OSError:
                continue
            finally:
                for extra in fds[1:]:
                    os.close(extra)
    finally:
        os.close(root)
    return out


@register_backend("bwrap")
class BwrapWarmBackend(Backend):
    """A pool of warm bwrap workers per limits key (see the module docstring)."""

    contains = None
    """Every probe of `selfcheck` must be contained."""

    def __init__(self, max_workers: int | None = None) -> None:
        cgroup.sweep_dead()
        self.max_workers = max_workers or os.cpu_count() or 1
        self._slots = threading.BoundedSemaphore(self.max_workers)
        self._idle: dict[tuple, queue.SimpleQueue] = {}
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="bwrap-spawner")
        """bwrap's --die-with-parent follows the THREAD that started it: workers are started
        from this one long-lived thread, never from a caller's (short-lived) pool thread."""

    @classmethod
    def create(cls, workers: int | None = None) -> BwrapWarmBackend:
        return cls(max_workers=workers)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = walls.available()
        if ok and compiled_inside_dir() is None:
            return False, "cannot keep the compiled supervisor in a private cache dir"
        return ok, f"{why}; warm workers reused across runs" if ok else why

    def run(self, argv: list[str], *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits = DEFAULT_LIMITS, collect: tuple[str, ...] = ()) -> ExecResult:
        files = {check_relpath(k): v for k, v in (files or {}).items()}
        collect = tuple(check_relpath(c) for c in collect)
        if len(files) > MAX_FILES:  # each file travels as one fd in one SCM_RIGHTS message
            from scalerl.sandbox.bwrap_cold import BwrapColdBackend

            return BwrapColdBackend().run(argv, stdin=stdin, files=files, limits=limits,
                                      collect=collect)
        cfg = supervisor_cfg(argv, limits, cwd=walls.WORK, collect=(), kill="all")
        cfg.update(make_dumpable=True, files=list(files))
        key = (limits.memory_mb, limits.processes, limits.file_size_mb)
        with self._slots:
            try:
                worker = self._acquire(key, limits)
            except (WorkerGone, OSError, RuntimeError) as exc:
                return ExecResult(status="sandbox_error", backend=self.name,
                                  detail=f"cannot start a warm bwrap worker: {exc}")
            healthy = False
            try:
                result, healthy = self._run_on(worker, cfg, stdin, files, limits, collect)
            except (WorkerGone, OSError) as exc:
                result = ExecResult(status="sandbox_error", backend=self.name,
                                    detail=f"warm worker failed: {exc}")
            finally:
                self._release(worker, key, healthy)
        return result

    def _acquire(self, key: tuple, limits: Limits) -> _Worker:
        with self._lock:
            idle = self._idle.setdefault(key, queue.SimpleQueue())
        while True:
            try:
                worker = idle.get_nowait()
            except queue.Empty:
                break
            try:
                worker.expect(b"ready", REPORT_SLACK_S)  # the wipe after its previous run
                return worker
            except WorkerGone:
                self._drop(worker)
        worker = self._spawner.submit(_Worker, limits).result()
        with self._lock:
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker, key: tuple, healthy: bool) -> None:
        if healthy:
            self._idle[key].put(worker)
        else:
            self._drop(worker)

    def _drop(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.destroy()

    def _run_on(self, worker: _Worker, cfg: dict, stdin: bytes, files: Mapping[str, bytes],
                limits: Limits, collect: tuple[str, ...]) -> tuple[ExecResult, bool]:
        oom_before = _oom_count(worker.cg)
        with contextlib.suppress(OSError):
            worker.cg._write("memory", "memory.failcnt", 0)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = [memfd_with(marshal.dumps(cfg, 4), "request"), memfd_with(stdin, "stdin"),
               out_w, err_w, *(memfd_with(data, "file") for data in files.values())]
        start = time.monotonic()
        try:
            socket.send_fds(worker.sock, [b"run"], fds)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            raw, report = _pump_warm(worker, out_r, err_r, limits, start)
        except WorkerGone:
            if _oom_count(worker.cg) > oom_before:  # the OOM killer took PID 1 with the run
                return ExecResult(status="memory_limit", backend=self.name,
                                  wall_s=time.monotonic() - start,
                                  detail=f"memory limit of {limits.memory_mb} MB reached"), False
            raise
        left = worker.strangers()
        extra = _read_collected(worker.pid1, collect, limits.output_bytes) if collect else {}
        worker.sock.send(b"next")
        cpu_s = report["cpu_s"] if report else 0.0
        oom = _oom_count(worker.cg) > oom_before or (
            worker.cg.hit_memory_limit() and b"MemoryError" in raw.stderr)
        status, detail = classify(report=report, timed_out=raw.timed_out,
                                  output_over=raw.output_over, oom=oom, limits=limits,
                                  cpu_s=cpu_s, setup_failed="the warm worker sent no report")
        result = build_result(raw, report, status, detail, backend=self.name, cpu_s=cpu_s)
        result = ExecResult(**{**result.__dict__, "extra": extra})
        return result, report is not None and not left

    def leaks(self) -> str:
        """Processes in idle workers besides bwrap, PID 1 and PID 1's one ready child."""
        with self._lock:
            workers = list(self._all)
        left = {}
        for w in workers:
            strangers = w.strangers()
            ready = [p for p in strangers if _ppid(p) == w.pid1]
            if len(strangers) > 1 or strangers != ready:
                left[w.pid1] = strangers
        return f"processes left in warm workers: {left}" if left else ""

    def close(self) -> None:
        with self._lock:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.destroy()
        self._spawner.shutdown(wait=False)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _oom_count(cg: cgroup.RunCgroup) -> int:
    if cg.version == 1:
        fields = dict(line.split() for line in cg._read("memory", "memory.oom_control")
                      .splitlines())
        return int(fields.get("oom_kill", 0))
    events = dict(line.split() for line in cg._read("", "memory.events").splitlines())
    return int(events.get("oom_kill", 0))


def _pump_warm(worker: _Worker, out_r: int, err_r: int, limits: Limits,
               start: float) -> tuple[Raw, dict | None]:
    """Read stdout/stderr (capped) and the report; kill the run at the deadline or the cap."""
    raw, report, killed = Raw(), None, False
    bufs = {out_r: raw.stdout, err_r: raw.stderr}
    deadline = start + limits.wall_s
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        sel.register(worker.sock, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                if killed or report is not None:
                    break  # pipes still open after the report, or no report after the kill
                raw.timed_out, killed = True, True
                worker.kill_run()
                deadline = now + REPORT_SLACK_S
            for key, _ in sel.select(timeout=max(0.0, min(deadline - now, 0.1))):
                if key.fileobj is worker.sock:
                    msg = worker.sock.recv(1 << 16)
                    if not msg:
                        raise WorkerGone("the warm worker died")
                    report = json.loads(msg)
                    sel.unregister(worker.sock)
                    deadline = min(deadline, time.monotonic() + 0.5)
                    continue
                state = read_capped(key.fd, bufs[key.fd], limits.output_bytes)
                if state == "eof":
                    sel.unregister(key.fd)
                elif state == "over" and not killed:
                    raw.output_over, killed = True, True
                    worker.kill_run()
                    deadline = time.monotonic() + REPORT_SLACK_S
    for fd in bufs:
        os.close(fd)
    raw.wall_s = time.monotonic() - start
    return raw, report
