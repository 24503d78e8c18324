"""Host side of a run: the supervisor's config and files, the `direct`-mode pump, the verdict.

Covered: the in-sandbox programs (inside/) as source text and compiled once into a private cache
dir, the supervisor's config, stdin from a memfd (no writer thread, no deadlock), one epoll loop
reading stdout, stderr and the supervisor's report pipe with byte caps, the wall deadline, killing
the whole run (through a backend-supplied `kill`) BEFORE the result is read, and one
classification of what happened into an `ExecResult` (shared by every backend). Not covered:
anything backend-specific (which command, cgroups, containers). Nothing here runs in the sandbox.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import marshal
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from scalerl.sandbox.base import ExecResult, Limits

INSIDE_DIR = Path(__file__).with_name("inside")
SUPERVISOR_SOURCE = (INSIDE_DIR / "supervisor.py").read_text()
"""inside/supervisor.py, run in the sandbox with `python3 -I -c` where no compiled copy exists."""
PYTHON = "/usr/bin/python3"
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONHASHSEED": "0"}
"""The whole environment of a sandboxed program: fixed values, nothing copied from the host."""
GRACE_S = 0.5
"""After the supervisor exits, how long pipes may stay open before the run is killed regardless."""
INSIDE_FILES = ("supervisor.py", "warm_init.py")
"""The programs of inside/ compiled for the sandbox (warm_init imports supervisor beside it)."""


@functools.lru_cache(maxsize=1)
def compiled_inside_dir() -> str | None:
    """A directory holding inside/'s programs compiled by the sandbox's own interpreter.

    Saves the ~5-8 ms compile of the supervisor source per run. Kept in a private cache dir (ours,
    not group/world-writable, readable by the sandbox uid) and bound read-only into the sandbox;
    None (the caller passes the source with -c) when that cannot be made safely.
    """
    here = INSIDE_DIR
    digest = hashlib.sha256(b"".join((here / f).read_bytes() for f in INSIDE_FILES))
    cache = Path(tempfile.gettempdir()) / f"scalerl-sandbox-{os.geteuid()}"
    target = cache / f"inside-{digest.hexdigest()[:16]}"
    try:
        cache.mkdir(mode=0o755, exist_ok=True)
        st = cache.stat()
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        if not target.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=cache))
            for f in INSIDE_FILES:
                subprocess.run([PYTHON, "-I", "-c", "import py_compile, sys; py_compile.compile("
                                "sys.argv[1], cfile=sys.argv[2], doraise=True)", str(here / f),
                                str(tmp / f.replace(".py", ".pyc"))],
                               check=True, capture_output=True, timeout=60)
                (tmp / f.replace(".py", ".pyc")).chmod(0o644)
            tmp.chmod(0o755)
            tmp.rename(target)
        return str(target)
    except (OSError, subprocess.SubprocessError):
        return None


def check_relpath(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.startswith("-"):
        raise ValueError(f"sandbox file name {name!r} must be a relative path inside the work dir")
    return str(p)


def rlimits_for(limits: Limits, *, address_space: bool = False) -> dict[str, int]:
    r = {"cpu": max(1, int(round(limits.cpu_s))), "nofile": limits.open_files,
         "fsize": limits.file_size_mb << 20, "core": 0}
    if address_space:  # process backend: no cgroup, so RLIMIT_AS stands in for memory
        r["as"] = limits.memory_mb << 20
        r["nproc"] = limits.processes
    return r


def encode_cfg(cfg: dict) -> str:
    """The supervisor's config argument: hex of marshal (the supervisor must not import json)."""
    return marshal.dumps(cfg, 4).hex()


def supervisor_cfg(argv: list[str], limits: Limits, *, cwd: str, collect: tuple[str, ...],
                 kill: str, report_fd: int = -1, address_space: bool = False) -> dict:
    if not argv:
        raise ValueError("sandbox argv is empty; give e.g. ['python', 'main.py']")
    return {"argv": list(argv), "cwd": cwd, "python": PYTHON, "kill": kill,
            "rlimits": rlimits_for(limits, address_space=address_space),
            "collect": [check_relpath(c) for c in collect], "collect_cap": limits.output_bytes,
            "report_fd": report_fd, "wall_s": limits.wall_s, "output_cap": limits.output_bytes}


def memfd_with(data: bytes, name: str = "data") -> int:
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class Raw:
    """What the host saw of one run, before classification."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    report: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    output_over: bool = False
    returncode: int | None = None
    wall_s: float = 0.0


def execute(cmd: list[str], *, stdin_fd: int, report_w: int, report_r: int,
            pass_fds: tuple[int, ...], limits: Limits, kill: Callable[[], None],
            env: Mapping[str, str], cwd: str | None = None,
            new_session: bool = False,
            on_start: Callable[[int], None] | None = None) -> Raw:
    """Run `cmd`, pump its pipes under caps until done or the deadline, kill the run, return Raw."""
    raw = Raw()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=stdin_fd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(report_w, *pass_fds),
                                env=dict(env), cwd=cwd, start_new_session=new_session)
    finally:
        for fd in (stdin_fd, report_w, *pass_fds):
            os.close(fd)
    if on_start:
        on_start(proc.pid)
    try:
        _pump(proc, raw, report_r, limits, start)
    finally:
        kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.returncode is None:  # cannot happen once the run is killed; never hang on it
            proc.kill()
            proc.wait()
        raw.returncode = proc.returncode
        raw.wall_s = time.monotonic() - start
        for f in (proc.stdout, proc.stderr):
            f.close()
        os.close(report_r)
    return raw


def _pump(proc: subprocess.Popen, raw: Raw, report_r: int, limits: Limits, start: float) -> None:
    caps = {proc.stdout.fileno(): (raw.stdout, limits.output_bytes),
            proc.stderr.fileno(): (raw.stderr, limits.output_bytes),
            report_r: (raw.report, 2 * limits.output_bytes + (1 << 20))}
    deadline = start + limits.wall_s
    with selectors.DefaultSelector() as sel:
        for fd in caps:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                raw.timed_out = True
                return
            if proc.poll() is not None:  # supervisor gone: what still holds a pipe is a leftover
                deadline = min(deadline, now + GRACE_S)
            for key, _ in sel.select(timeout=min(deadline - now, 0.05)):
                state = read_capped(key.fd, *caps[key.fd])
                if state == "eof":
                    sel.unregister(key.fd)
                elif state == "over" and key.fd != report_r:
                    raw.output_over = True
                    return


def read_capped(fd: int, buf: bytearray, cap: int) -> str:
    """Read what is there into buf: 'more' (pipe still open), 'eof', or 'over' (cut to cap)."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return "more"
        if not chunk:
            return "eof"
        buf += chunk
        if len(buf) > cap:
            del buf[cap:]
            return "over"


def parse_report(raw: Raw) -> dict | None:
    if not raw.report:
        return None
    try:
        return json.loads(bytes(raw.report))
    except ValueError:
        return None


def decode_files(report: dict | None) -> dict[str, bytes]:
    if not report:
        return {}
    return {k: base64.b64decode(v) for k, v in report.get("files", {}).items()}


def classify(*, report: dict | None, timed_out: bool, output_over: bool, oom: bool,
             limits: Limits, cpu_s: float, setup_failed: str = "") -> tuple[str, str]:
    """(status, detail) from what was observed, in order of precedence."""
    sig = report.get("signal") if report else None
    code = report.get("exit_code") if report else None
    if oom:
        return "memory_limit", f"memory limit of {limits.memory_mb} MB reached"
    if timed_out:
        return "timeout", f"wall time limit of {limits.wall_s:g} s reached"
    if sig in (signal.SIGXCPU,) or (sig == signal.SIGKILL and cpu_s >= limits.cpu_s):
        return "timeout", f"CPU time limit of {limits.cpu_s:g} s reached"
    if output_over:
        return "output_limit", f"stdout or stderr passed {limits.output_bytes} bytes"
    if report is None:
        return "sandbox_error", setup_failed or "the sandbox supervisor sent no report"
    if sig is not None:
        return "runtime_error", f"killed by signal {sig} ({signal.Signals(sig).name})"
    if code:
        return "runtime_error", f"exit code {code}"
    return "ok", ""


def build_result(raw: Raw, report: dict | None, status: str, detail: str, *, backend: str,
                 cpu_s: float) -> ExecResult:
    truncated = raw.output_over or bool(report and report.get("files_truncated"))
    return ExecResult(
        status=status, exit_code=report.get("exit_code") if report else None,
        signal=report.get("signal") if report else None, stdout=bytes(raw.stdout),
        stderr=bytes(raw.stderr), wall_s=raw.wall_s, cpu_s=cpu_s, truncated=truncated,
        backend=backend, detail=detail, extra=decode_files(report))
