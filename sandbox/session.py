"""The sandboxed persistent Python interpreter of tool use: `PythonSession`, `SessionPool`,
`LazySessions` (a pool made at its first use, as runs and `scalerl score` hold one).

One session per rollout: variables survive between calls (a final bare expression's repr is shown,
as in a notebook), inside the configured sandbox backend (bwrap by default, docker; `process` only
when named, and it is not a security boundary), no network, `SessionLimits` per call (wall time)
and per session (memory, processes), output cut to `max_output_chars`. Failure semantics: code that
raises or times out is an observation (`ToolOutcome` status error / timeout), not an exception;
code that kills its own interpreter (os._exit, a segfault, the memory limit) gives an `error`
observation saying so and the next call runs in a fresh interpreter (state lost, said in the
output); a timeout the interpreter cannot interrupt (SIGALRM first, the host kills after
`KILL_GRACE_S`) restarts it likewise. `SessionFailed` is raised only when a sandbox cannot start,
or by a call on (or during) a closed session. `close()` kills the sandbox and everything in it
(a call in progress ends at once); a session dropped without close() is killed when collected.
`SessionPool` pre-starts `warm` sessions in the background so `acquire()` costs no start-up; all
of it is thread-safe, and a slow call holds only its own session's lock. Not covered: daemons
that leave their process group on `process` (no boundary there, see process.py); the output of a
call whose interpreter died (it was in the dead sandbox). Not here: the sandboxes' walls
(bwrap_argv, docker, cgroup), starting them and the framing (session_launch.py), the program
inside (inside/repl.py), parsing tool calls out of model text (envs/).
"""

from __future__ import annotations

import collections
import threading
import time
import warnings
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from scalerl.sandbox import backend_problem, resolve_backend
from scalerl.sandbox.base import Limits
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.session_launch import LAUNCHERS, Sandbox, StartFailed
from scalerl.sandbox.session_types import SessionFailed, ToolOutcome

KILL_GRACE_S = 1.0
"""Past `call_s`, how long the interpreter may take to report its own interruption before the
host kills the session."""
TRUNCATED_NOTE = "\n[output truncated]"
RESTARTED = ("a fresh interpreter was started for the next call: variables, imports and "
             "definitions from earlier calls are gone")


@dataclass(frozen=True)
class SessionLimits:
    """Limits of one tool session."""

    call_s: float = 10.0
    """Wall time of one call; past it the call is interrupted (status timeout)."""
    memory_mb: int = 512
    """Memory of the whole session (cgroup / container; RLIMIT_AS on `process`)."""
    processes: int = 32
    """Processes and threads the session may have at once."""
    max_output_chars: int = 2000
    """stdout+stderr shown to the model; cut past this (and `truncated` set)."""

    def __post_init__(self) -> None:
        checks = {"call_s": (float, int), "memory_mb": (int,), "processes": (int,),
                  "max_output_chars": (int,)}
        for name, types in checks.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, types) or not value > 0:
                raise ValueError(f"SessionLimits.{name} must be a number > 0, got {value!r}")
        if self.memory_mb < 32:
            raise ValueError(f"SessionLimits.memory_mb must be >= 32 (an interpreter needs "
                             f"~10 MB), got {self.memory_mb}")

    def sandbox_limits(self) -> Limits:
        """The backends' `Limits` for a session under these (files, fds: the defaults)."""
        return Limits(wall_s=self.call_s, cpu_s=self.call_s, memory_mb=self.memory_mb,
                      processes=self.processes)

    @property
    def capture_bytes(self) -> int:
        """Bytes of output the interpreter sends back (enough for `max_output_chars` of UTF-8)."""
        return 4 * self.max_output_chars + 16


def shown(output: str, size: int, limits: SessionLimits) -> tuple[str, bool]:
    """The output the model sees and whether it was cut (`size`: bytes the code wrote)."""
    cut = len(output) > limits.max_output_chars or size > limits.capture_bytes
    if cut:
        return output[:limits.max_output_chars] + TRUNCATED_NOTE, True
    return output, False


class PythonSession:
    """One persistent interpreter in its own sandbox; calls are serialised per session."""

    def __init__(self, box: Sandbox, limits: SessionLimits,
                 restart: collections.abc.Callable[[], Future]) -> None:
        self.limits = limits
        self._box: Sandbox | None = box
        self._restart = restart
        self._pending: Future | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def alive(self) -> bool:
        """False once closed (or once a fresh interpreter could not be started)."""
        return not self._closed

    @property
    def backend(self) -> str:
        box = self._box
        return box.backend if box else ""

    def pids(self) -> list[int]:
        """Host pids of the sandbox's processes now (empty after close)."""
        box = self._box
        return box.launched.pids() if box else []

    def run(self, code: str) -> ToolOutcome:
        """Run `code` in the session; an error or timeout is an outcome, never an exception.

        Raises SessionFailed only when the session is closed or its sandbox cannot be started.
        """
        if not isinstance(code, str):
            raise TypeError(f"PythonSession.run takes the code as str, got {type(code).__name__}")
        with self._lock:
            box = self._current()
            start = time.monotonic()
            try:
                box.send({"code": code})
            except OSError:
                if self._closed:
                    raise SessionFailed("the tool session was closed during the call") from None
                return self._died(box, start, "")
            reply = box.receive(start + self.limits.call_s + KILL_GRACE_S)
            if isinstance(reply, dict) and reply.get("status") in ("ok", "error", "timeout"):
                return self._outcome(reply, time.monotonic() - start)
            if self._closed:
                raise SessionFailed("the tool session was closed during the call")
            if reply == "deadline":
                return self._uninterruptible(box, start)
            return self._died(box, start, "" if reply == "eof" else f" ({reply})")

    def close(self) -> None:
        """Kill the session's sandbox and everything it started; idempotent."""
        self._closed = True
        running = self._box  # killed before taking the lock: a call in progress ends now
        if running is not None:
            running.kill()
        with self._lock:
            box, self._box = self._box, None
            pending, self._pending = self._pending, None
        if box is not None:
            box.kill()
        if pending is not None:
            pending.add_done_callback(_kill_result)

    def _current(self) -> Sandbox:
        if self._closed:
            raise SessionFailed("the tool session is closed")
        if self._box is None:
            pending, self._pending = self._pending or self._restart(), None
            try:
                self._box = pending.result()
            except StartFailed as exc:
                self._closed = True
                raise SessionFailed(f"the tool sandbox could not be restarted: {exc}") from exc
        return self._box

    def _outcome(self, reply: dict, latency_s: float) -> ToolOutcome:
        output, truncated = shown(str(reply.get("output", "")), int(reply.get("bytes", 0)),
                                  self.limits)
        if reply["status"] == "timeout":
            output = f"{output}{_sep(output)}timed out after {self.limits.call_s:g} s"
        return ToolOutcome(reply["status"], output, latency_s, truncated)

    def _replace(self, box: Sandbox) -> None:
        """Kill `box` and start its successor, both in the background (removing a container
        takes seconds; the observation need not wait; the next call waits for the successor)."""
        self._box = None
        threading.Thread(target=box.kill, name="tool-session-kill", daemon=True).start()
        if not self._closed:
            try:
                self._pending = self._restart()
            except SessionFailed:  # the pool was closed: the next call says so
                self._closed = True

    def _died(self, box: Sandbox, start: float, extra: str) -> ToolOutcome:
        detail = box.exit_detail() + extra
        self._replace(box)
        text = f"the Python interpreter died ({detail}); {RESTARTED}"
        return ToolOutcome("error", text, time.monotonic() - start)

    def _uninterruptible(self, box: Sandbox, start: float) -> ToolOutcome:
        self._replace(box)
        text = (f"timed out after {self.limits.call_s:g} s; the code could not be interrupted, "
                f"so the interpreter was killed and {RESTARTED}")
        return ToolOutcome("timeout", text, time.monotonic() - start)


def _sep(text: str) -> str:
    return "" if not text or text.endswith("\n") else "\n"


def close_all(sessions: list[PythonSession]) -> None:
    """Close sessions at once (removing a container takes seconds); returns when all are dead."""
    threads = [threading.Thread(target=s.close, name="tool-session-close") for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _kill_result(future: Future) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().kill()


class SessionPool:
    """Hands out fresh `PythonSession`s; keeps `warm` of them started in the background."""

    def __init__(self, sandbox: SandboxConfig, limits: SessionLimits = SessionLimits(),
                 warm: int = 2) -> None:
        if not isinstance(warm, int) or isinstance(warm, bool) or warm < 0:
            raise ValueError(f"SessionPool warm must be an integer >= 0, got {warm!r}")
        problem = backend_problem(sandbox.backend)
        if problem:
            raise SessionFailed(f"the Python tool cannot run here: {problem}")
        self.backend = resolve_backend(sandbox.backend)
        if self.backend not in LAUNCHERS:
            raise SessionFailed(f"no tool session launcher for sandbox backend "
                                f"{self.backend!r}; known: {sorted(LAUNCHERS)}")
        if self.backend == "process":
            from scalerl.sandbox.process import WARNING, NotASandboxWarning

            warnings.warn(WARNING, NotASandboxWarning, stacklevel=2)
        self.limits = limits
        self.warm = warm
        self._sandbox_limits = limits.sandbox_limits()
        self._spawner = ThreadPoolExecutor(max(2, warm), thread_name_prefix="tool-session")
        """bwrap's --die-with-parent follows the THREAD that started it: every sandbox is
        started from these long-lived threads, never from a caller's."""
        self._warm: collections.deque[Future] = collections.deque()
        self._out: weakref.WeakSet[PythonSession] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        with self._lock:
            self._refill()

    def warm_ready(self) -> int:
        """How many warm sessions are started and waiting (failed starts not counted)."""
        with self._lock:
            futures = list(self._warm)
        return sum(f.done() and not f.cancelled() and f.exception() is None for f in futures)

    def _start(self) -> Future:
        return self._spawner.submit(Sandbox.start, self.backend, self._sandbox_limits,
                                    float(self.limits.call_s), self.limits.capture_bytes)

    def _refill(self) -> None:  # holds _lock
        while not self._closed and len(self._warm) < self.warm:
            self._warm.append(self._start())

    def _take(self, refill: bool = True) -> Future:
        """A warm start when one is ready or under way, else a new start."""
        with self._lock:
            if self._closed:
                raise SessionFailed("the tool session pool is closed")
            future = self._warm.popleft() if self._warm else self._start()
            if refill:
                self._refill()
        return future

    def acquire(self) -> PythonSession:
        """A fresh started session; SessionFailed (saying why) when its sandbox cannot start."""
        for attempt in range(2):  # a failed warm start is retried once with a fresh one
            try:
                box = self._take(refill=False).result()
                break
            except StartFailed as exc:
                if attempt:
                    raise SessionFailed(f"the Python tool's sandbox could not start: "
                                        f"{exc}") from exc
        session = PythonSession(box, self.limits, self._take)
        with self._lock:  # refilled only now: the starts compete with this thread for the GIL
            closed = self._closed
            self._out.add(session)
            self._refill()
        if closed:
            session.close()
            raise SessionFailed("the tool session pool is closed")
        return session

    def close(self) -> None:
        """Kill the warm sessions and every session handed out; idempotent."""
        with self._lock:
            self._closed = True
            warm, self._warm = list(self._warm), collections.deque()
            handed = list(self._out)
        for future in warm:
            future.add_done_callback(_kill_result)
        close_all(handed)
        self._spawner.shutdown(wait=False)

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LazySessions:
    """A run's tool sessions: a `SessionPool` made at the first `acquire` (a run whose
    environments never call the tool starts no sandbox). `SessionFailed` from `acquire` when
    the sandbox cannot run here, or once closed."""

    def __init__(self, sandbox: SandboxConfig) -> None:
        self.sandbox = sandbox
        self._pool: SessionPool | None = None
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> PythonSession:
        with self._lock:
            if self._closed:
                raise SessionFailed("the tool session pool is closed")
            if self._pool is None:
                self._pool = SessionPool(self.sandbox)
            pool = self._pool
        return pool.acquire()

    def close(self) -> None:
        with self._lock:
            self._closed, pool = True, self._pool
        if pool is not None:
            pool.close()
