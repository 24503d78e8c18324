"""The parent of one local vLLM server: the server's whole process group ends with the run.

`python -m scalerl.rollout.server_guard --parent PID --grace S -- COMMAND...` runs COMMAND (a vLLM
server, rollout/local_servers.py) as its child, in its own process group (the guard is started
as the leader of a new session), and ends every process of that group (the API server, its
engine core, the workers) with SIGTERM, then SIGKILL after `--grace` seconds:

- when the run's process PID is gone (its parent changes: checked every POLL_S). A parent-death
  signal (prctl PR_SET_PDEATHSIG) is not used: it fires when the *thread* that started the child
  ends, and a server restarted from the generator's event-loop thread would die with that
  thread; nor would it reach the engine core and workers, which are not the run's children;
- when the API server exits on its own (a crash): its engine core and workers, still holding
  their memory, follow it before the guard exits with the server's exit code, so a restart
  finds the GPU free.

A SIGTERM to the group (the run stopping its servers) reaches the server itself; the guard then
waits for it as above. The guard is its group's subreaper, so an engine core orphaned by its API
server stays its child and is reaped. It starts nothing else and decides nothing about restarts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2
"""Seconds between checks that the run is still there and the server still running."""
PR_SET_CHILD_SUBREAPER = 36
"""prctl option (linux/prctl.h): orphaned descendants are reparented to this process."""


def group_members() -> list[int]:
    """Every other live (not zombie) process of this process group."""
    import psutil

    me, group = os.getpid(), os.getpgrp()
    out = []
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if (proc.pid != me and os.getpgid(proc.pid) == group
                    and proc.info["status"] != psutil.STATUS_ZOMBIE):
                out.append(proc.pid)
    return out


def reap(child: int) -> int | None:
    """Reap every exited child (orphans included); the exit code of `child` if it was one."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)


def end_group(grace_s: float, child: int) -> int | None:
    """SIGTERM every other process of the group, SIGKILL those left after `grace_s`, reaping
    them; the exit code of `child` if it is reaped here."""
    deadline, code = time.monotonic() + grace_s, None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in group_members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        while group_members() and time.monotonic() < deadline and sig == signal.SIGTERM:
            code = _either(code, reap(child))
            time.sleep(POLL_S)
    return _either(code, reap(child))


def _either(code: int | None, other: int | None) -> int | None:
    return code if code is not None else other


def become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def guard(parent: int, grace_s: float, command: list[str]) -> int:
    """Run `command` and end its group as the module docstring says; its exit code."""
    if os.getppid() != parent:
        print(f"server_guard: the run (pid {parent}) was gone before its server started",
              file=sys.stderr, flush=True)
        return 1
    become_subreaper()
    stopping: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: stopping.append(signal.Signals(signum).name))
    child = subprocess.Popen(command).pid  # reaped by `reap`, not by Popen
    deadline = None
    while (code := reap(child)) is None:
        if deadline is None and (os.getppid() != parent or stopping):
            if os.getppid() != parent:
                print(f"server_guard: the run (pid {parent}) that started this vLLM server is "
                      f"gone: stopping the server (SIGKILL after {grace_s:.0f} s)",
                      file=sys.stderr, flush=True)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
        if (deadline is not None and time.monotonic() > deadline
                and (code := end_group(0.0, child)) is not None):
            break  # the server, SIGKILLed with its group, reaped there
        time.sleep(POLL_S)
    end_group(grace_s, child)  # what the server left: its engine core, its workers
    return code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="server_guard", description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    sys.exit(guard(args.parent, args.grace, command))


if __name__ == "__main__":
    main()
