"""The hostile-program suite: run every probe in `probes/` on a backend and judge it from the host.

Covered: each probe's status, the time its verdict took, survivors (host /proc scanned for the
run's token; leftover run cgroups), leaks seen from the host (planted secrets in the output, host
listener connections, interpreter files changed). Used by `scalerl sandbox check` and by
tests/sandbox. Not covered: kernel exploits, timing side channels, attacks on the docker daemon.
A backend lists what it contains in `contains` (None = everything); other probes are not run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from scalerl.sandbox.base import Backend, ExecResult, Limits

PROBES_DIR = Path(__file__).with_name("probes")
QUICK = Limits(wall_s=1.5, cpu_s=1.0, memory_mb=128, processes=16, open_files=64, file_size_mb=4)
SLACK_S = 1.5
"""How long past its wall limit a verdict may take (sandbox start, kill, reading)."""


@dataclass
class Context:
    """Host-side state of one probe run: its token, the planted secrets, the listener."""

    token: str = field(default_factory=lambda: f"scalerl-probe-{uuid.uuid4().hex[:12]}")
    secret: str = field(default_factory=lambda: uuid.uuid4().hex)
    listener: socket.socket | None = None
    planted: Path | None = None
    hashes: dict[str, str] = field(default_factory=dict)


Check = Callable[[ExecResult, Context], str | None]


@dataclass(frozen=True)
class Probe:
    name: str
    expect: frozenset[str]
    limits: Limits = QUICK
    check: Check | None = None
    args: Callable[[Context], list[str]] = lambda ctx: []


def _no_secret(r: ExecResult, ctx: Context) -> str | None:
    blob = r.stdout + r.stderr
    return "the planted secret reached the program" if ctx.secret.encode() in blob else None


def _no_connection(r: ExecResult, ctx: Context) -> str | None:
    ctx.listener.setblocking(False)
    try:
        ctx.listener.accept()
    except BlockingIOError:
        return "the program connected to the outside" if b"CONNECTED" in r.stdout else None
    return "the host listener on 127.0.0.1 accepted a connection from the program"


def _interpreter_intact(r: ExecResult, ctx: Context) -> str | None:
    if b"WROTE" in r.stdout:
        return "the program wrote to the interpreter: " + r.stdout.decode(errors="replace")[:200]
    changed = [p for p, h in ctx.hashes.items() if _sha(p) != h]
    return f"interpreter files changed on the host: {changed}" if changed else None


def _nothing_written(r: ExecResult, ctx: Context) -> str | None:
    if b"WROTE" in r.stdout or b"mkdir []" not in r.stdout:
        return "wrote outside /work, /tmp, /dev/shm: " + r.stdout.decode(errors="replace")[:200]
    return None


def _int_below(limit: int, what: str) -> Check:
    def check(r: ExecResult, ctx: Context) -> str | None:
        value = int(r.stdout.split()[-1]) if r.stdout.split() else -1
        return None if 0 <= value <= limit else f"{what}: {value} (limit {limit})"
    return check


def _stdout_is(expected: bytes) -> Check:
    return lambda r, ctx: None if r.stdout == expected else f"stdout {r.stdout[:80]!r}..."


def _signal_11(r: ExecResult, ctx: Context) -> str | None:
    return None if r.signal == 11 else f"expected SIGSEGV, got signal {r.signal}"


def _capped_at_limit(r: ExecResult, ctx: Context) -> str | None:
    kept = max(len(r.stdout), len(r.stderr))
    return None if r.truncated and kept <= QUICK.output_bytes else f"kept {kept} bytes"


ANY_END = frozenset({"ok", "runtime_error", "timeout", "memory_limit"})
PROBES: tuple[Probe, ...] = (
    Probe("cpu_spin", frozenset({"timeout"})),
    Probe("sleep", frozenset({"timeout"})),
    Probe("ignored_signals", frozenset({"timeout"})),
    Probe("memory_bomb", frozenset({"memory_limit"})),
    Probe("fork_bomb", frozenset({"timeout", "runtime_error", "memory_limit"})),
    Probe("thread_bomb", frozenset({"timeout", "runtime_error", "memory_limit"})),
    Probe("infinite_stdout", frozenset({"output_limit"}),
          Limits(**{**QUICK.__dict__, "output_bytes": 1 << 20}), _capped_at_limit),
    Probe("stderr_flood", frozenset({"output_limit"}),
          Limits(**{**QUICK.__dict__, "output_bytes": 1 << 20}), _capped_at_limit),
    Probe("disk_fill", frozenset({"ok"}), check=_int_below(3 * (QUICK.file_size_mb << 20) + 4096,
                                                           "bytes written")),
    Probe("fd_exhaustion", frozenset({"ok"}), check=_int_below(QUICK.open_files, "open fds")),
    Probe("segfault", frozenset({"runtime_error"}), check=_signal_11),
    Probe("env_secrets", ANY_END, check=_no_secret),
    Probe("loopback_network", frozenset({"ok"}), check=_no_connection,
          args=lambda ctx: [str(ctx.listener.getsockname()[1])]),
    Probe("host_files", frozenset({"ok"}), check=_no_secret, args=lambda ctx: [str(ctx.planted)]),
    Probe("interpreter_writes", frozenset({"ok"}), check=_interpreter_intact),
    Probe("readonly_root", frozenset({"ok"}), check=_nothing_written),
    Probe("kill_parent", frozenset({"ok", "runtime_error"})),
    Probe("raw_syscalls", frozenset({"ok"})),
    Probe("daemon", frozenset({"ok"})),
    Probe("grandchild_stdout", frozenset({"ok"}), Limits(wall_s=10.0)),
    Probe("fd1_direct", frozenset({"ok"}), Limits(), _stdout_is(b"42\n")),
    Probe("big_output", frozenset({"ok"}), Limits(), _stdout_is(b"y" * 1_299_999 + b"\n")),
    Probe("stdin_eof", frozenset({"ok"}), Limits(), _stdout_is(b"read 0\n")),
)
PROBE_NAMES = tuple(p.name for p in PROBES)


def _sha(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc}"


@contextlib.contextmanager
def host_setup(probe: Probe) -> Iterator[Context]:
    """Plant secrets, open a loopback listener, hash the interpreter.

    The secret sits in our environment and in the real /proc/<pid>/environ of a host `sleep`
    (putenv does not show in our own /proc/self/environ), and in a file in /root.
    """
    ctx = Context()
    os.environ["SCALERL_PROBE_SECRET"] = ctx.secret
    ctx.planted = Path("/root" if os.access("/root", os.W_OK) else "/tmp") / ctx.token
    ctx.planted.write_text(ctx.secret)
    ctx.listener = socket.create_server(("127.0.0.1", 0))
    ctx.listener.listen(8)
    holder = subprocess.Popen(["sleep", "60"], env={"SCALERL_PROBE_SECRET": ctx.secret})
    if probe.name == "interpreter_writes":
        ctx.hashes = {p: _sha(p) for p in (sys.executable, "/usr/bin/python3", os.__file__)}
    try:
        yield ctx
    finally:
        holder.kill()
        holder.wait()
        os.environ.pop("SCALERL_PROBE_SECRET", None)
        ctx.planted.unlink(missing_ok=True)
        ctx.listener.close()


def survivors(token: str, grace_s: float = 1.0) -> list[int]:
    """Host pids whose command line carries the run's token, after a short grace.

    The supervisor's config travels hex-encoded in its argv, so the hex form counts too.
    """
    marks = (token.encode(), token.encode().hex().encode())
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                with contextlib.suppress(OSError):
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    if any(m in cmd for m in marks) and stat[0] != "Z":
                        found.append(int(pid))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@dataclass(frozen=True)
class Verdict:
    probe: str
    status: str
    wall_s: float
    escaped: str
    """Empty when contained; else what went wrong."""
    detail: str = ""
    token: str = ""
    """The run's token (in the command line of every process it made that we can trace)."""


def run_probe(backend: Backend, probe: Probe) -> Verdict:
    source = (PROBES_DIR / f"{probe.name}.py").read_bytes()
    with host_setup(probe) as ctx:
        r = backend.run(["python", "probe.py", ctx.token, *probe.args(ctx)],
                        files={"probe.py": source}, limits=probe.limits)
        problems = []
        if r.status not in probe.expect:
            problems.append(f"status {r.status} not in {sorted(probe.expect)} ({r.detail}; "
                            f"stderr {r.stderr[-200:]!r})")
        if r.wall_s > probe.limits.wall_s + SLACK_S:
            problems.append(f"verdict took {r.wall_s:.1f} s (limit {probe.limits.wall_s:g} s "
                            f"+ {SLACK_S} s)")
        if probe.check and (why := probe.check(r, ctx)):
            problems.append(why)
        if alive := survivors(ctx.token):
            problems.append(f"processes survived the run: {alive}")
        if leaks := backend_leaks(backend):
            problems.append(leaks)
    return Verdict(probe.name, r.status, r.wall_s, "; ".join(problems), r.detail, ctx.token)


def backend_leaks(backend: Backend) -> str:
    leaks = getattr(backend, "leaks", None)
    return leaks() if leaks else ""


def run_suite(backend: Backend, names: tuple[str, ...] | None = None) -> list[Verdict]:
    """Run the probes this backend claims to contain (all of them for bwrap and docker)."""
    contains = getattr(backend, "contains", None)
    chosen = [p for p in PROBES if (names is None or p.name in names)
              and (contains is None or p.name in contains)]
    return [run_probe(backend, p) for p in chosen]
