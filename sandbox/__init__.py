"""Sandbox: run untrusted programs under bubblewrap, docker or (loudly) bare rlimits.

`get_backend(name, workers)` gives the shared instance of a backend: the one named, else `bwrap`
(warm bubblewrap workers) where it works, else docker; `bwrap-cold` (a fresh sandbox per run,
slower) and `process` (no boundary) only when named. The caller passes the run's settings
(`SandboxConfig`) as values: there is no process-wide configuration. `backend_problem()` says, in
one line with the fix, why the backend a run would get cannot work here (the preflight of code
tasks). Backends keep warm state, so one instance per (name, workers) is shared per process
(`close_all()` releases them). Not here: the backends themselves (one module each: bwrap_warm,
bwrap_cold, docker, process), the shapes (`Limits`, `ExecResult` in base.py), the programs that
run inside the sandbox (inside/).
"""

from __future__ import annotations

import atexit
import os
import threading

# Importing a backend module registers it.
from scalerl.sandbox import bwrap_cold as _bwrap_cold  # noqa: F401
from scalerl.sandbox import bwrap_warm as _bwrap_warm  # noqa: F401
from scalerl.sandbox import process as _process  # noqa: F401
from scalerl.sandbox.base import BACKENDS, Backend, ExecResult, Limits, register_backend
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.pool import Job, SandboxPool

try:  # the docker backend needs the `docker` SDK; bwrap/process must work without it
    from scalerl.sandbox import docker as _docker  # noqa: F401
except ImportError as _exc:  # pragma: no cover - the SDK is a declared dependency
    _DOCKER_IMPORT_ERROR = str(_exc)
else:
    _DOCKER_IMPORT_ERROR = ""

DEFAULT_ORDER = ("bwrap", "docker")
"""Backends `get_backend(None)` may choose when none is named, best first. `process` is
never chosen implicitly."""
_BWRAP_FIX = ("install bubblewrap (as root: apt-get install -y bubblewrap; `make install` does "
              "it) and run as root or in a delegated cgroup")
FIXES = {"bwrap": _BWRAP_FIX, "bwrap-cold": _BWRAP_FIX,
         "docker": "start the docker daemon (dockerd), then build the image: scalerl sandbox image",
         "process": "python3 must be at /usr/bin/python3"}
"""backend -> what to do when it is not available here."""

_shared: dict[tuple[str, int | None], Backend] = {}
"""(name, workers) -> the shared Backend built with them."""
_owner_pid = os.getpid()
"""The process that built `_shared`: a forked child must not share its parent's warm workers."""
_lock = threading.Lock()

__all__ = ["Backend", "ExecResult", "Job", "Limits", "SandboxConfig", "SandboxPool",
           "available_backends", "backend_problem", "close_all", "get_backend",
           "register_backend", "resolve_backend"]


def available_backends() -> dict[str, tuple[bool, str]]:
    """name -> (usable here, reason), for every registered backend."""
    out = {name: cls.available() for name, cls in sorted(BACKENDS.items())}
    if "docker" not in out:
        out["docker"] = (False, f"docker backend not importable: {_DOCKER_IMPORT_ERROR}")
    return out


def backend_problem(name: str | None = None) -> str | None:
    """None when backend `name` (None: the default choice) works here; else one line naming the
    backend, why it does not work, and the fix. Starts no workers."""
    if name is None:
        try:
            _default_name()
        except RuntimeError as exc:
            return (f"{exc}; fix: {FIXES['bwrap']}, or {FIXES['docker']}")
        return None
    if name not in BACKENDS:
        return f"unknown sandbox backend {name!r}; known: {', '.join(sorted(BACKENDS))}"
    ok, why = BACKENDS[name].available()
    if ok:
        return None
    others = [n for n in DEFAULT_ORDER
              if n != name and n in BACKENDS and BACKENDS[n].available()[0]]
    alternative = f", or set sandbox.backend to one that works here: {', '.join(others)}" if (
        others) else ""
    return (f"sandbox backend {name!r} is not available: {why}; fix: "
            f"{FIXES.get(name, 'see scalerl sandbox backends')}{alternative}")


def resolve_backend(name: str | None) -> str:
    """The backend `get_backend(name)` would use: `name`, else bwrap, else docker, whichever works
    here (RuntimeError saying why each is unavailable when none does)."""
    return _default_name() if name is None else name


def get_backend(name: str | None = None, workers: int | None = None) -> Backend:
    """The shared instance of backend `name` (None: bwrap, else docker, whichever works here) with
    `workers` programs at once (None: the backend's default); `process` gives a fresh instance,
    which warns, every time."""
    name = resolve_backend(name)
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; known: {sorted(BACKENDS)}")
    ok, why = BACKENDS[name].available()
    if not ok:
        raise RuntimeError(f"sandbox backend {name!r} is not available here: {why}")
    if name == "process":  # warns at every start: a fresh instance each time
        return BACKENDS[name].create(workers)
    with _lock:
        _forget_if_forked()
        if (name, workers) not in _shared:
            _shared[(name, workers)] = BACKENDS[name].create(workers)
        return _shared[(name, workers)]


def _default_name() -> str:
    reasons = []
    for candidate in DEFAULT_ORDER:
        if candidate in BACKENDS:
            ok, why = BACKENDS[candidate].available()
            if ok:
                return candidate
            reasons.append(f"{candidate}: {why}")
    raise RuntimeError("no sandbox backend available (" + "; ".join(reasons) + "); the "
                       "'process' backend runs code unconfined and must be named explicitly")


def _forget_if_forked() -> None:
    """In a forked child, drop (without closing) the parent's shared backends. Holds `_lock`."""
    global _owner_pid
    if _owner_pid != os.getpid():
        _shared.clear()
        _owner_pid = os.getpid()


@atexit.register
def close_all() -> None:
    """Release every shared backend's warm workers (bwrap workers, docker containers)."""
    with _lock:
        _forget_if_forked()
        backends = list(_shared.values())
        _shared.clear()
    for backend in backends:
        backend.close()
