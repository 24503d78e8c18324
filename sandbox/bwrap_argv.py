"""The bubblewrap command line (the walls) both bwrap backends share, and whether it works here.

`bwrap_argv` gives every namespace unshared (no network, own PID namespace), no nested user
namespaces, all capabilities dropped, uid/gid 65534 inside (bwrap itself started as host uid
65534 when we are root), read-only /usr (and the /bin, /lib links), size-capped tmpfs /work (the
cwd), /tmp and /dev/shm, a read-only root and /dev, and the environment allowlist. `available`
says whether that runs here. Not here: cgroups (cgroup.py), running a program (bwrap_cold.py,
bwrap_warm.py), seccomp filtering (not done by either backend).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from scalerl.sandbox import cgroup
from scalerl.sandbox.base import Limits
from scalerl.sandbox.host_run import PYTHON, SANDBOX_ENV

SANDBOX_UID = 65534
INSIDE_MOUNT = "/.scalerl"
"""Where the compiled in-sandbox programs (inside/) are bound read-only."""
DROP_TO_NOBODY = ["setpriv", f"--reuid={65534}", f"--regid={65534}", "--clear-groups",
                  "--no-new-privs"]
"""Run bwrap itself as host uid 65534 (when we are root): bwrap started by root maps the sandbox
uid to host root, so the program would own every root-owned file it could reach (measured: it
read a 0600 root file bound into the sandbox). Started as nobody, it owns nothing on the host."""
WORK = "/work"
RUN_OVERHEAD_PIDS = 2
"""bwrap's outer process and the supervisor (PID 1 inside) count against `pids.max` too."""
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
def available() -> tuple[bool, str]:
    """(usable here, reason): bwrap, setpriv when root, a writable cgroup, one real start."""
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
