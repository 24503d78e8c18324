"""The `process` backend: rlimits and a new session only. NOT a security boundary.

Covered: wall deadline, CPU / address-space / open-files / file-size rlimits, output caps, a fresh
private temp dir as cwd, the allowlisted environment, `python3 -I`, the program's process group
killed at the end. Not covered, by design: network, the host's files and /proc (including other
processes' environments), a program that leaves its process group (setsid) and survives, the
process limit for root (RLIMIT_NPROC does not bind uid 0). It warns on every start and is only
used when asked for by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

from scalerl.sandbox.base import Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.host_run import (
    PYTHON,
    SANDBOX_ENV,
    SUPERVISOR_SOURCE,
    build_result,
    check_relpath,
    classify,
    encode_cfg,
    execute,
    memfd_with,
    parse_report,
    supervisor_cfg,
)

WARNING = ("sandbox backend 'process' is NOT a security boundary: the program can read host files "
           "and /proc, use the network and leave daemons behind; use bwrap or docker for "
           "untrusted code")


class NotASandboxWarning(UserWarning):
    """Emitted on every start of the `process` backend."""

DEFAULT_LIMITS = Limits()


@register_backend("process")
class ProcessBackend(Backend):
    """rlimits + new session (see the module docstring for what this does not stop)."""

    contains = frozenset({"cpu_spin", "sleep", "ignored_signals", "memory_bomb", "thread_bomb",
                          "infinite_stdout", "stderr_flood", "fd_exhaustion", "segfault",
                          "grandchild_stdout", "fd1_direct", "big_output", "stdin_eof"})
    """Probes of `selfcheck` this backend contains; the others (network, files, /proc, daemons,
    fork bombs as root, killing the parent) it does not, and `sandbox check` says so."""

    def __init__(self) -> None:
        warnings.warn(WARNING, NotASandboxWarning, stacklevel=2)
        print(f"WARNING: {WARNING}", file=sys.stderr)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if not Path(PYTHON).exists():
            return False, f"{PYTHON} not found"
        return True, "rlimits + new session only; not a security boundary (explicit use only)"

    def run(self, argv: list[str], *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits = DEFAULT_LIMITS, collect: tuple[str, ...] = ()) -> ExecResult:
        files = {check_relpath(k): v for k, v in (files or {}).items()}
        work = tempfile.mkdtemp(prefix="scalerl-process-")
        try:
            for name, data in files.items():
                path = Path(work, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            return self._run_in(work, argv, stdin, limits, collect)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _run_in(self, work: str, argv: list[str], stdin: bytes, limits: Limits,
                collect: tuple[str, ...]) -> ExecResult:
        report_r, report_w = os.pipe()
        cfg = supervisor_cfg(argv, limits, cwd=work, collect=collect, kill="group",
                           report_fd=report_w, address_space=True)
        holder: dict[str, int] = {}

        def kill() -> None:  # the supervisor's session: itself and whatever stayed in it
            with contextlib.suppress(ProcessLookupError, KeyError):
                os.killpg(holder["pgid"], signal.SIGKILL)

        cmd = [PYTHON, "-I", "-c", SUPERVISOR_SOURCE, "direct", encode_cfg(cfg)]
        stdin_fd = memfd_with(stdin, "stdin")
        raw = execute(cmd, stdin_fd=stdin_fd, report_w=report_w, report_r=report_r, pass_fds=(),
                      limits=limits, kill=kill, env=SANDBOX_ENV, cwd=work, new_session=True,
                      on_start=lambda pid: holder.__setitem__("pgid", pid))
        report = parse_report(raw)
        cpu_s = report["cpu_s"] if report else 0.0
        oom = b"MemoryError" in raw.stderr and bool(report and report.get("exit_code"))
        status, detail = classify(
            report=report, timed_out=raw.timed_out, output_over=raw.output_over, oom=oom,
            limits=limits, cpu_s=cpu_s,
            setup_failed=f"supervisor exited {raw.returncode} without a report (did the program "
                         "kill its supervisor?)")
        if report is None and status == "sandbox_error" and raw.returncode and raw.returncode < 0:
            status = "runtime_error"  # the program can signal its parent here; that is its doing
        return build_result(raw, report, status, detail, backend=self.name, cpu_s=cpu_s)
