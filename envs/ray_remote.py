"""What local grading uses, served by a Ray grader's actors: a sandbox backend, a math pool, and
a source of tool sessions, each with the interface of its local counterpart.

`RemoteBackend.run` is `Backend.run` (sandbox/base.py) on the least loaded actor;
`RemoteMathPool.run_many` is the deadline pool's (envs/deadline_pool.py) on one actor, whose own
pool of `workers` processes checks the batch; `RemoteSessions.acquire` places a rollout's tool
session on the actor with the fewest sessions, and every call of that `RemoteSession` goes to it
until `close` kills it there. Failure semantics: an actor lost mid-request (envs/ray_grading.py
`GradingLost`) or a node whose sandbox failed (`HostFailed`) raise here; the code verifier turns
that into `SandboxFailure` (an `error` verdict), the math verifier into `error` outcomes, and a
session raises `SessionFailed` (the rollout's `error`), as a sandbox failing here would. No Ray
import here (the grader holds it); no verdicts.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scalerl.envs.ray_grading import CALL_GRACE_S, GradingLost, HostFailed, RayGrader, Slot
from scalerl.sandbox.base import ExecResult, Limits
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.session import KILL_GRACE_S, SessionLimits, close_all
from scalerl.sandbox.session_types import SessionFailed, ToolOutcome


def _worst_case_s(grader: RayGrader, one_s: float) -> float:
    """A request's time limit: its own worst case times the requests an actor may hold ahead of
    it, plus CALL_GRACE_S."""
    ahead = max((s.cap for s in grader.slots), default=1)
    return CALL_GRACE_S + one_s * (1 + ahead)


class RemoteBackend:
    """Sandbox backend `sandbox` on the grader's actors (Backend.run's signature)."""

    def __init__(self, grader: RayGrader, sandbox: SandboxConfig) -> None:
        self.grader, self.sandbox = grader, sandbox
        self.name = f"{sandbox.backend or 'default'}@ray"

    def run(self, argv: Sequence[str], stdin: bytes = b"", files: Mapping[str, bytes] | None = None,
            limits: Limits | None = None, collect: Sequence[str] = ()) -> ExecResult:
        limits = limits or Limits()
        return self.grader.call("run_code", self.sandbox, tuple(argv), stdin, dict(files or {}),
                                limits, tuple(collect),
                                timeout_s=_worst_case_s(self.grader, limits.wall_s))


class RemoteMathPool:
    """`pool_of(workers)` (e.g. the math verifier's `shared_pool`) on an actor: the deadline
    pool's `run_many`."""

    def __init__(self, grader: RayGrader, pool_of: Callable[[int | None], Any],
                 workers: int | None) -> None:
        self.grader, self.pool_of, self.workers = grader, pool_of, workers

    def run_many(self, fn: Callable, jobs: Sequence[tuple], timeout_s: float,
                 affinity: Callable | None = None) -> list[Any]:
        jobs = list(jobs)
        return self.grader.call("math", self.pool_of, self.workers, fn, jobs, timeout_s, affinity,
                                timeout_s=_worst_case_s(self.grader, timeout_s * len(jobs)))


class RemoteSession:
    """One rollout's tool session, pinned to the actor it was opened on."""

    def __init__(self, grader: RayGrader, slot: Slot, sid: str, limits: SessionLimits) -> None:
        self.grader, self.slot, self.sid, self.limits = grader, slot, sid, limits
        self._closed = False
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return not self._closed

    def run(self, code: str) -> ToolOutcome:
        """The call's outcome on the session's actor; SessionFailed when the session is closed,
        its actor was lost (its state with it) or its sandbox failed."""
        if not isinstance(code, str):
            raise TypeError(f"RemoteSession.run takes the code as str, got {type(code).__name__}")
        if self._closed:
            raise SessionFailed("the tool session is closed")
        one = self.limits.call_s + KILL_GRACE_S
        try:
            return self.grader.call("session_run", self.sid, code, slot=self.slot,
                                    timeout_s=_worst_case_s(self.grader, one))
        except (GradingLost, HostFailed) as exc:
            raise SessionFailed(f"the tool session's grading actor failed: {exc}") from None

    def close(self) -> None:
        """Kill the session on its actor; idempotent (nothing to do when the actor is gone)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.grader.control(self.slot, "close_session", self.sid)
        self.grader.session_closed(self.slot)


class RemoteSessions:
    """A run's tool sessions on the grader's actors (the `SessionSource` of envs/environment.py):
    `acquire` opens one on the actor with the fewest; `close` kills every one handed out."""

    def __init__(self, grader: RayGrader, sandbox: SandboxConfig,
                 limits: SessionLimits | None = None) -> None:
        self.grader, self.sandbox = grader, sandbox
        self.limits = limits or SessionLimits()
        self._out: weakref.WeakSet[RemoteSession] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> RemoteSession:
        if self._closed:
            raise SessionFailed("the tool session pool is closed")
        try:
            slot, sid = self.grader.call_on("open_session", self.sandbox, self.limits,
                                            timeout_s=CALL_GRACE_S, session=True)
        except RuntimeError as exc:  # GradingLost, HostFailed, or Ray could not be reached
            raise SessionFailed(f"the Python tool's sandbox could not start: {exc}") from None
        session = RemoteSession(self.grader, slot, sid, self.limits)
        with self._lock:
            closed = self._closed
            self._out.add(session)
        if closed:
            session.close()
            raise SessionFailed("the tool session pool is closed")
        return session

    def close(self) -> None:
        with self._lock:
            self._closed = True
            handed = list(self._out)
        close_all(handed)  # type: ignore[arg-type] - close() is all close_all calls


class Remote:
    """A Ray grader as local grading's three parts (envs/grading.py `cluster_grader`)."""

    def __init__(self, grader: RayGrader) -> None:
        self.grader = grader

    def backend(self, sandbox: SandboxConfig) -> RemoteBackend:
        return RemoteBackend(self.grader, sandbox)

    def math_pool(self, pool_of: Callable[[int | None], Any], workers: int | None
                  ) -> RemoteMathPool:
        return RemoteMathPool(self.grader, pool_of, workers)

    def sessions(self, sandbox: SandboxConfig) -> RemoteSessions:
        return RemoteSessions(self.grader, sandbox)

    def sandbox_problem(self, backend: str | None) -> str | None:
        """None when every node of the cluster can run `backend`; else one line (the fix)."""
        try:
            return self.grader.sandbox_problem(backend)
        except (RuntimeError, ValueError) as exc:
            return str(exc)
