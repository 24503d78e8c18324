"""`bwrap-cold`: one fresh bubblewrap sandbox (namespaces, tmpfs, cgroup) per run; the strongest.

About 0.3x bare-subprocess throughput here (bench sandbox); `bwrap` (warm.py) reuses these
walls across runs for >1x. This module also builds the bwrap command line both use.

Covered: every namespace unshared (no network, own PID namespace whose init is our launcher, so
the whole run dies with it and the program cannot signal it), no nested user namespaces, all
capabilities dropped, uid/gid 65534 inside, read-only /usr (and the /bin, /lib links), a fresh
size-capped tmpfs at /work (the cwd) and /tmp, an environment from a fixed allowlist, `python3 -I`,
rlimits (CPU, open files, file size) in the program only, and a per-run cgroup (memory = no swap,
pids, one CPU, freezer) that is frozen and SIGKILLed before the result is read.
Not covered: seccomp filtering of syscalls (the kernel's attack surface stays that of an
unprivileged user namespace), collected files of a run killed at its deadline (lost with the
tmpfs), and machines without a writable cgroup (both bwrap backends are then unavailable).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from scalerl.sandbox import cgroup
from scalerl.sandbox.base import Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.runner import (
    LAUNCHER_SOURCE,
    PYTHON,
    SANDBOX_ENV,
    build_result,
    check_relpath,
    classify,
    encode_cfg,
    execute,
    launcher_cfg,
    launcher_dir,
    memfd_with,
    parse_report,
)

SANDBOX_UID = 65534
LAUNCHER_MOUNT = "/.scalerl"
DROP_TO_NOBODY = ["setpriv", f"--reuid={65534}", f"--regid={65534}", "--clear-groups",
                  "--no-new-privs"]
"""Run bwrap itself as host uid 65534 (when we are root): bwrap started by root maps the sandbox
uid to host root, so the program would own every root-owned file it could reach (measured: it
read a 0600 root file bound into the sandbox). Started as nobody, it owns nothing on the host."""
WORK = "/work"
RUN_OVERHEAD_PIDS = 2
"""bwrap's outer process and the launcher (PID 1 inside) count against `pids.max` too."""
JOIN_CGROUP = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; '
               'shift; n=$((n-1)); done; exec "$@"')
"""sh prelude: put this process in the run's cgroups before it execs bwrap (no race, no
preexec_fn in a threaded parent)."""


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        args += ["--ro-bind-try", f, f]
    return args


def bwrap_argv(limits: Limits, files: Mapping[str, int], file_bytes: int,
               extra: tuple[str, ...] = ()) -> list[str]:
    """The bwrap command line up to (not including) the program; `files` maps name -> fd.

    `extra` bwrap options go before the root and /dev are remounted read-only.
    """
    tmpfs_bytes = (limits.file_size_mb << 20) + file_bytes
    args = [*(DROP_TO_NOBODY if os.geteuid() == 0 else []),
            "bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--as-pid-1", "--cap-drop", "ALL", "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID), "--hostname", "sandbox", *_system_binds(),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(tmpfs_bytes), "--perms", "0700", "--tmpfs", WORK,
            "--size", str(limits.file_size_mb << 20), "--perms", "1777", "--tmpfs", "/tmp",
            "--size", str(limits.file_size_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    made = set()
    for name, fd in files.items():
        parent = os.path.dirname(name)
        while parent and parent not in made:
            made.add(parent)
            args += ["--dir", f"{WORK}/{parent}"]
            parent = os.path.dirname(parent)
        args += ["--perms", "0644", "--file", str(fd), f"{WORK}/{name}"]
    args += [*extra, "--remount-ro", "/", "--remount-ro", "/dev", "--chdir", WORK, "--clearenv"]
    for k, v in SANDBOX_ENV.items():
        args += ["--setenv", k, v]
    return args


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    if not shutil.which("bwrap"):
        return False, "bubblewrap not installed (Debian package `bubblewrap`)"
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return False, "running as root without `setpriv` (util-linux) to drop to uid 65534"
    ok, why = cgroup.available()
    if not ok:
        return False, f"no per-run cgroup for memory/process limits: {why}"
    cmd = [*bwrap_argv(Limits(), {}, 0), PYTHON, "-I", "-c", "pass"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to start: {exc}"
    if done.returncode != 0:
        return False, f"bwrap cannot make namespaces here: {done.stderr.decode()[-300:].strip()}"
    return True, f"bubblewrap with {why}"

DEFAULT_LIMITS = Limits()


@register_backend("bwrap-cold")
class BwrapBackend(Backend):
    """Cold sandbox per run: fresh namespaces + tmpfs + cgroup (see the module docstring)."""

    contains = None
    """Every probe of `selfcheck` must be contained."""

    def __init__(self) -> None:
        cgroup.sweep_dead()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return _probe()

    def leaks(self) -> str:
        """Run cgroups left behind (a leak when no run is in progress)."""
        left = cgroup.leftover_run_cgroups()
        return f"run cgroups left behind: {[str(p) for p in left]}" if left else ""

    def run(self, argv: list[str], *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits = DEFAULT_LIMITS, collect: tuple[str, ...] = ()) -> ExecResult:
        files = {check_relpath(k): v for k, v in (files or {}).items()}
        report_r, report_w = os.pipe()
        cfg = launcher_cfg(argv, limits, cwd=WORK, collect=collect, kill="all",
                           report_fd=report_w)
        try:
            cg = cgroup.RunCgroup.create(limits.memory_mb, limits.processes + RUN_OVERHEAD_PIDS)
        except (OSError, RuntimeError) as exc:
            os.close(report_r)
            os.close(report_w)
            return ExecResult(status="sandbox_error", backend=self.name,
                              detail=f"cannot create the run's cgroup: {exc}")
        try:
            return self._run_in(cg, cfg, stdin, files, limits, report_r, report_w)
        finally:
            cg.kill()
            cg.remove()

    def _run_in(self, cg: cgroup.RunCgroup, cfg: dict, stdin: bytes, files: Mapping[str, bytes],
                limits: Limits, report_r: int, report_w: int) -> ExecResult:
        file_fds = {name: memfd_with(data, "file") for name, data in files.items()}
        stdin_fd = memfd_with(stdin, "stdin")
        procs = cg.procs_files
        pyc_dir = launcher_dir()
        bind = ("--ro-bind", pyc_dir, LAUNCHER_MOUNT) if pyc_dir else ()
        launcher = [f"{LAUNCHER_MOUNT}/launcher.pyc"] if pyc_dir else ["-c", LAUNCHER_SOURCE]
        cmd = ["/bin/sh", "-c", JOIN_CGROUP, "sh", str(len(procs)), *procs,
               *bwrap_argv(limits, file_fds, sum(map(len, files.values())), bind),
               PYTHON, "-I", *launcher, "direct", encode_cfg(cfg)]
        raw = execute(cmd, stdin_fd=stdin_fd, report_w=report_w, report_r=report_r,
                      pass_fds=tuple(file_fds.values()), limits=limits, kill=cg.kill,
                      env=SANDBOX_ENV)
        report = parse_report(raw)
        cpu_s = report["cpu_s"] if report else cg.cpu_s()
        oom = False
        with contextlib.suppress(OSError):
            oom = cg.oom_killed() or (cg.hit_memory_limit() and b"MemoryError" in raw.stderr)
        status, detail = classify(
            report=report, timed_out=raw.timed_out, output_over=raw.output_over, oom=oom,
            limits=limits, cpu_s=cpu_s,
            setup_failed=f"bwrap exited {raw.returncode}: "
                         f"{bytes(raw.stderr[-400:]).decode(errors='replace').strip()}")
        return build_result(raw, report, status, detail, backend=self.name, cpu_s=cpu_s)
