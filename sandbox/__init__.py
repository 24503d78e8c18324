"""Sandbox: run untrusted programs under bubblewrap, docker or (loudly) bare rlimits.

`get_backend()` picks `bwrap` (warm bubblewrap workers) where it works, else docker; `bwrap-cold`
(a fresh sandbox per run, slower) and `process` (no boundary) only when named. Backends keep warm
state, so one instance per name is shared per process (`close_all()` releases them).
Shapes (`Limits`, `ExecResult`) live in `base.py`; each backend in its own module.
"""

from __future__ import annotations

import atexit
import os
import threading

# Importing a backend module registers it.
from scalerl.sandbox import bwrap as _bwrap  # noqa: F401
from scalerl.sandbox import process as _process  # noqa: F401
from scalerl.sandbox import warm as _warm  # noqa: F401
from scalerl.sandbox.base import BACKENDS, Backend, ExecResult, Limits, register_backend

try:  # the docker backend needs the `docker` SDK; bwrap/process must work without it
    from scalerl.sandbox import docker as _docker  # noqa: F401
except ImportError as _exc:  # pragma: no cover - the SDK is a declared dependency
    _DOCKER_IMPORT_ERROR = str(_exc)
else:
    _DOCKER_IMPORT_ERROR = ""

DEFAULT_ORDER = ("bwrap", "docker")
"""Backends `get_backend(None)` may choose, best first. `process` is never chosen implicitly."""

_shared: dict = {}
"""name -> shared Backend, plus '__pid__': the process that made them."""
_lock = threading.Lock()

__all__ = ["Backend", "ExecResult", "Limits", "available_backends", "close_all", "get_backend",
           "register_backend"]


def available_backends() -> dict[str, tuple[bool, str]]:
    """name -> (usable here, reason), for every registered backend."""
    out = {name: cls.available() for name, cls in sorted(BACKENDS.items())}
    if "docker" not in out:
        out["docker"] = (False, f"docker backend not importable: {_DOCKER_IMPORT_ERROR}")
    return out


def get_backend(name: str | None = None) -> Backend:
    """The shared instance of backend `name` (None: bwrap, else docker, whichever works here)."""
    if name is None:
        reasons = []
        for candidate in DEFAULT_ORDER:
            if candidate in BACKENDS:
                ok, why = BACKENDS[candidate].available()
                if ok:
                    return get_backend(candidate)
                reasons.append(f"{candidate}: {why}")
        raise RuntimeError("no sandbox backend available (" + "; ".join(reasons) + "); the "
                           "'process' backend runs code unconfined and must be named explicitly")
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; known: {sorted(BACKENDS)}")
    ok, why = BACKENDS[name].available()
    if not ok:
        raise RuntimeError(f"sandbox backend {name!r} is not available here: {why}")
    if name == "process":  # warns at every start: a fresh instance each time
        return BACKENDS[name]()
    with _lock:
        if _shared.get("__pid__") != os.getpid():  # a forked child must not share warm workers
            _shared.clear()
            _shared["__pid__"] = os.getpid()
        if name not in _shared:
            _shared[name] = BACKENDS[name]()
        return _shared[name]


@atexit.register
def close_all() -> None:
    """Release every shared backend's warm workers (docker containers)."""
    with _lock:
        mine = _shared.get("__pid__") == os.getpid()
        backends = [b for k, b in _shared.items() if k != "__pid__"] if mine else []
        _shared.clear()
    for backend in backends:
        backend.close()
