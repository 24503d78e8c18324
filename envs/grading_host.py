"""`GradingHost`: what one grading actor of a Ray cluster runs, as a plain class.

envs/ray_grading.py makes it a Ray actor (one per node, or per `verifiers.cores_per_actor`
cores); it never imports Ray itself, so it runs (and is tested) as well in this process. It holds
the node's own sandbox backends (sandbox/ `get_backend`: the same code local grading runs), the
math verifier's deadline pools (the driver hands the pool's maker, e.g. envs/math/verifier.py
`shared_pool`, by reference: no import here) and the tool sessions of the rollouts placed on it,
by id. Every method returns `("ok", value)` or `("failed", one line)`: a failure of the node's
sandbox is a value the driver turns into an `error` verdict or a `SessionFailed`, never a Ray
exception. Not here: choosing an actor, counting in-flight requests, actor death (the driver's).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scalerl.sandbox import available_backends, backend_problem, close_all, get_backend
from scalerl.sandbox.base import Limits
from scalerl.sandbox.config import KNOWN_BACKENDS, SandboxConfig
from scalerl.sandbox.session import PythonSession, SessionLimits, SessionPool
from scalerl.sandbox.session_types import SessionFailed

Result = tuple[str, Any]
"""("ok", value) or ("failed", one line saying why)."""


def _failed(exc: BaseException) -> Result:
    return "failed", f"{type(exc).__name__}: {exc}"


def _unblock_signals() -> None:
    """Clear this thread's signal mask. A Ray worker's threads block SIGINT, and every thread
    and process started from them inherits the mask: a sandboxed program would see SIGINT
    blocked (an uncaught KeyboardInterrupt then exits 130 instead of dying by SIGINT, a
    different verdict detail than local grading's). Called before anything here starts one."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


class GradingHost:
    """One node's grading: code runs, math checks and tool sessions (module docstring)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers
        """Sandboxed programs at once when the run's `sandbox.workers` is null (the actor's
        cores); None: the backend's own default."""
        self._pools: dict[tuple, SessionPool] = {}
        self._sessions: dict[str, PythonSession] = {}
        self._math: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False

    def info(self) -> dict[str, Any]:
        """This node's pid, cores and sandbox backends: {name: problem or None} (None: the
        best backend here, as `sandbox.backend: null` chooses)."""
        problems = {name: backend_problem(name) for name in (None, *KNOWN_BACKENDS)}
        usable = sorted(n for n, (ok, _) in available_backends().items() if ok)
        return {"pid": os.getpid(), "cores": len(os.sched_getaffinity(0)),
                "problems": problems, "backends": usable}

    def ping(self) -> int:
        return os.getpid()

    def run_code(self, sandbox: SandboxConfig, argv: Sequence[str], stdin: bytes,
                 files: Mapping[str, bytes], limits: Limits, collect: tuple[str, ...] = ()
                 ) -> Result:
        """One sandboxed run in this node's backend of `sandbox` (its ExecResult)."""
        _unblock_signals()
        try:
            backend = get_backend(sandbox.backend, sandbox.workers or self.workers)
            return "ok", backend.run(list(argv), stdin=stdin, files=files, limits=limits,
                                     collect=collect)
        except Exception as exc:  # noqa: BLE001 - the node's sandbox failed: the driver's error
            return _failed(exc)

    def math(self, pool_of: Callable[[int | None], Any], workers: int | None,
             fn: Callable, jobs: list[tuple], timeout_s: float,
             affinity: Callable | None = None) -> Result:
        """`pool_of(workers).run_many(fn, jobs, timeout_s, affinity=affinity)`: the Outcomes."""
        _unblock_signals()
        try:
            pool = pool_of(workers)
            with self._lock:
                if all(p is not pool for p in self._math):
                    self._math.append(pool)
            return "ok", pool.run_many(fn, jobs, timeout_s, affinity=affinity)
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)

    def open_session(self, sandbox: SandboxConfig, limits: SessionLimits) -> Result:
        """A fresh tool session in this node's sandbox; its id."""
        _unblock_signals()
        key = (sandbox.backend, limits)
        try:
            with self._lock:
                if self._closed:
                    raise SessionFailed("the grading actor is shutting down")
                if key not in self._pools:
                    self._pools[key] = SessionPool(sandbox, limits)
                pool = self._pools[key]
            session = pool.acquire()
        except Exception as exc:  # noqa: BLE001 - SessionFailed included: the driver raises it
            return _failed(exc)
        sid = uuid.uuid4().hex
        with self._lock:
            self._sessions[sid] = session
        return "ok", sid

    def session_run(self, sid: str, code: str) -> Result:
        """One call of session `sid` (a ToolOutcome); failed when this actor does not hold it
        (it was restarted since the session opened) or its sandbox failed."""
        _unblock_signals()
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            return "failed", ("the tool session is gone: its grading actor was restarted or "
                              "closed it")
        try:
            return "ok", session.run(code)
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)

    def close_session(self, sid: str) -> Result:
        """Kill session `sid` (nothing when this actor does not hold it)."""
        with self._lock:
            session = self._sessions.pop(sid, None)
        if session is not None:
            session.close()
        return "ok", session is not None

    def live_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def shutdown(self) -> Result:
        """Kill every session and warm sandbox, stop the math pools; idempotent."""
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
            self._sessions.clear()
            math, self._math = self._math, []
        for pool in pools:  # closes the sessions it handed out too
            pool.close()
        for pool in math:
            pool.shutdown()
        close_all()
        return "ok", None
