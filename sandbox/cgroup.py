"""Per-run cgroups: memory and process limits that hold for root, CPU accounting, kill-everything.

Covered: cgroup v1 (one directory per controller: memory, pids, cpu, cpuacct, freezer under
`/sys/fs/cgroup/<controller>/<our own cgroup>/scalerl/<run>`) and cgroup v2 (one directory under
our own cgroup, controllers enabled in `cgroup.subtree_control`). A run is killed by freezing the
cgroup, SIGKILLing every member, thawing; the directory is removed afterwards.
Not covered: cgroup v2 where our own cgroup holds processes and is not the root (the kernel's
"no internal processes" rule forbids enabling controllers there): `RunCgroup.create` raises with
the reason. v2 is written to the kernel documentation but only v1 was exercised on this machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")


def cgroup_version() -> int | None:
    """1 or 2 for the hierarchy this machine uses for memory limits; None if neither is usable."""
    if (ROOT / "memory" / "memory.limit_in_bytes").exists():
        return 1
    if (ROOT / "cgroup.controllers").exists():
        return 2
    return None


def _own_paths() -> dict[str, str]:
    """controller (or '' for v2) -> our cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for ctrl in ctrls.split(",") if ctrls else [""]:
            paths[ctrl] = path
    return paths


def available() -> tuple[bool, str]:
    version = cgroup_version()
    if version is None:
        return False, "no cgroup v1 memory controller and no cgroup v2 at /sys/fs/cgroup"
    if version == 1:
        missing = [c for c in V1_CONTROLLERS if c != "cpu" and not (ROOT / c).is_dir()]
        if missing:
            return False, f"cgroup v1 without controllers {missing}"
        base = _v1_base("memory").parent
    else:
        base = ROOT / _own_paths().get("", "/").lstrip("/")
    if not os.access(base, os.W_OK):
        return False, f"cgroup {base} is not writable (need root or a delegated cgroup)"
    return True, f"cgroup v{version}"


def _v1_base(ctrl: str) -> Path:
    return ROOT / ctrl / _own_paths().get(ctrl, "/").lstrip("/") / "scalerl"


@dataclass
class RunCgroup:
    """The cgroup(s) of one run. `procs_files`: write a pid to each to put it in the run."""

    version: int
    dirs: dict[str, Path]
    memory_bytes: int

    @classmethod
    def create(cls, memory_mb: int, processes: int, cpus: float = 1.0,
               tag: str = "run") -> RunCgroup:
        """`tag`: "run" (one run, removed after it) or "warm" (a long-lived warm worker)."""
        version = cgroup_version()
        name = f"{os.getpid()}-{tag}-{uuid.uuid4().hex[:12]}"  # pid first: leftover_run_cgroups
        memory = memory_mb << 20
        if version == 1:
            dirs = {c: _v1_base(c) / name for c in V1_CONTROLLERS if (ROOT / c).is_dir()}
            for d in dirs.values():
                d.mkdir(parents=True)
            cg = cls(1, dirs, memory)
            cg._write("memory", "memory.limit_in_bytes", memory)
            with contextlib.suppress(OSError):  # absent without swap accounting
                cg._write("memory", "memory.memsw.limit_in_bytes", memory)
            cg._write("pids", "pids.max", processes)
            if "cpu" in dirs:
                cg._write("cpu", "cpu.cfs_period_us", 100_000)
                cg._write("cpu", "cpu.cfs_quota_us", int(100_000 * cpus))
            return cg
        if version == 2:
            return cls._create_v2(name, memory, processes, cpus)
        raise RuntimeError("no usable cgroup hierarchy under /sys/fs/cgroup")

    @classmethod
    def _create_v2(cls, name: str, memory: int, processes: int, cpus: float) -> RunCgroup:
        own = ROOT / _own_paths().get("", "/").lstrip("/")
        base = own / "scalerl"
        try:
            (own / "cgroup.subtree_control").write_text("+memory +pids +cpu")
            base.mkdir(exist_ok=True)
            (base / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        except OSError as exc:
            raise RuntimeError(f"cgroup v2: cannot enable memory/pids/cpu below {own} ({exc}); "
                               "run scalerl in a delegated cgroup (e.g. systemd-run --scope -p "
                               "Delegate=yes)") from exc
        d = base / name
        d.mkdir()
        cg = cls(2, {"": d}, memory)
        cg._write("", "memory.max", memory)
        with contextlib.suppress(OSError):
            cg._write("", "memory.swap.max", 0)
        cg._write("", "pids.max", processes)
        cg._write("", "cpu.max", f"{int(100_000 * cpus)} 100000")
        return cg

    def _write(self, ctrl: str, name: str, value) -> None:
        (self.dirs[ctrl] / name).write_text(str(value))

    def _read(self, ctrl: str, name: str) -> str:
        return (self.dirs[ctrl] / name).read_text()

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> list[int]:
        d = self.dirs.get("pids") or self.dirs.get("")
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]

    def oom_killed(self) -> bool:
        """True when the kernel OOM-killed (or refused memory to) a process of the run."""
        if self.version == 1:
            fields = dict(line.split() for line in self._read("memory", "memory.oom_control")
                          .splitlines())
            return int(fields.get("oom_kill", 0)) > 0 or int(fields.get("under_oom", 0)) > 0
        events = dict(line.split() for line in self._read("", "memory.events").splitlines())
        return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0

    def hit_memory_limit(self) -> bool:
        """The run touched the limit at least once (it may have survived with MemoryError)."""
        if self.version == 1:
            return int(self._read("memory", "memory.failcnt")) > 0
        return self.oom_killed()

    def cpu_s(self) -> float:
        if self.version == 1 and "cpuacct" in self.dirs:
            return int(self._read("cpuacct", "cpuacct.usage")) / 1e9
        if self.version == 2:
            stat = dict(line.split() for line in self._read("", "cpu.stat").splitlines())
            return int(stat.get("usage_usec", 0)) / 1e6
        return 0.0

    def kill(self, timeout_s: float = 2.0) -> bool:
        """Freeze, SIGKILL every member, thaw; True when the cgroup is empty afterwards."""
        if self.version == 2 and (self.dirs[""] / "cgroup.kill").exists():
            self._write("", "cgroup.kill", 1)
        else:
            self._set_frozen(True)
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._set_frozen(False)
        deadline = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _set_frozen(self, frozen: bool) -> None:
        if self.version == 1:
            self._write("freezer", "freezer.state", "FROZEN" if frozen else "THAWED")
            if frozen:
                deadline = time.monotonic() + 1.0
                while self._read("freezer", "freezer.state").strip() != "FROZEN":
                    if time.monotonic() > deadline:
                        break  # a stuck FREEZING still stops new forks; SIGKILL follows anyway
                    time.sleep(0.001)
        else:
            self._write("", "cgroup.freeze", 1 if frozen else 0)

    def remove(self) -> bool:
        """rmdir every directory of the run; False (and the dirs stay) if members remain."""
        ok = True
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
            else:
                ok = False
        return ok


def _run_dirs() -> list[Path]:
    version = cgroup_version()
    if version == 1:
        bases = [_v1_base(c) for c in V1_CONTROLLERS if (ROOT / c).is_dir()]
    elif version == 2:
        bases = [ROOT / _own_paths().get("", "/").lstrip("/") / "scalerl"]
    else:
        bases = []
    return [p for b in bases if b.is_dir() for p in b.iterdir() if p.is_dir()]


def leftover_run_cgroups() -> list[Path]:
    """This process's run cgroups still present (a leak if none of its runs is in progress).

    Other processes (other graders on the machine) share the `scalerl` parent, so only names
    starting with our pid count.
    """
    return [p for p in _run_dirs() if p.name.startswith(f"{os.getpid()}-run-")]


def sweep_dead() -> int:
    """Remove empty run cgroups whose creating process is gone (after a crash); returns how many."""
    removed = 0
    for p in _run_dirs():
        pid = p.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                p.rmdir()
                removed += 1
    return removed
