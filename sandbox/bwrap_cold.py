"""The `bwrap-cold` backend: one fresh bubblewrap sandbox (namespaces, tmpfs, cgroup) per run.

The strongest backend, and the slowest (`scalerl bench sandbox` measures it); `bwrap`
(bwrap_warm.py) reuses these walls across runs for >1x. The command line itself is built in
bwrap_argv.py; the in-sandbox supervisor is inside/supervisor.py.

Covered: every namespace unshared (no network, own PID namespace whose init is our supervisor, so
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
import os
from collections.abc import Mapping

from scalerl.sandbox import bwrap_argv as walls
from scalerl.sandbox import cgroup
from scalerl.sandbox.base import Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.host_run import (
    PYTHON,
    SANDBOX_ENV,
    SUPERVISOR_SOURCE,
    build_result,
    check_relpath,
    classify,
    compiled_inside_dir,
    encode_cfg,
    execute,
    memfd_with,
    parse_report,
    supervisor_cfg,
)

DEFAULT_LIMITS = Limits()


@register_backend("bwrap-cold")
class BwrapColdBackend(Backend):
    """Cold sandbox per run: fresh namespaces + tmpfs + cgroup (see the module docstring)."""

    contains = None
    """Every probe of `selfcheck` must be contained."""

    def __init__(self) -> None:
        cgroup.sweep_dead()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return walls.available()

    def leaks(self) -> str:
        """Run cgroups left behind (a leak when no run is in progress)."""
        left = cgroup.leftover_run_cgroups()
        return f"run cgroups left behind: {[str(p) for p in left]}" if left else ""

    def run(self, argv: list[str], *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits = DEFAULT_LIMITS, collect: tuple[str, ...] = ()) -> ExecResult:
        files = {check_relpath(k): v for k, v in (files or {}).items()}
        report_r, report_w = os.pipe()
        cfg = supervisor_cfg(argv, limits, cwd=walls.WORK, collect=collect, kill="all",
                           report_fd=report_w)
        try:
            cg = cgroup.RunCgroup.create(limits.memory_mb,
                                         limits.processes + walls.RUN_OVERHEAD_PIDS)
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
        pyc_dir = compiled_inside_dir()
        bind = ("--ro-bind", pyc_dir, walls.INSIDE_MOUNT) if pyc_dir else ()
        supervisor = ([f"{walls.INSIDE_MOUNT}/supervisor.pyc"] if pyc_dir
                      else ["-c", SUPERVISOR_SOURCE])
        cmd = ["/bin/sh", "-c", walls.JOIN_CGROUP, "sh", str(len(procs)), *procs,
               *walls.bwrap_argv(limits, file_fds, sum(map(len, files.values())), bind),
               PYTHON, "-I", *supervisor, "direct", encode_cfg(cfg)]
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
