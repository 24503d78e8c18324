"""A process pool whose per-call deadlines are enforced from outside the worker.

Each worker is a daemon process with its own pipe; the caller's thread waits on the pipes and, when
a call passes its deadline, SIGKILLs that worker and starts a replacement, so a stuck sympy call
costs one timeout, never a hung run. A worker that dies mid-call yields an `error` outcome. The
pool is thread-safe, starts workers lazily and reuses them. It knows nothing about math.

Workers start from this module, never from the caller's `__main__` (envs/caller_main.py says
why), so `fn` and `initializer` must live in an importable module, not in the caller's script.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Literal

from scalerl.envs.base import truncate
from scalerl.envs.caller_main import no_caller_main

START_TIMEOUT_S = 120.0
"""How long a new worker may take to import its modules and say it is ready."""


@dataclass(frozen=True)
class Outcome:
    """The result of one call: `ok` with its value, or `timeout`/`error` with why."""

    status: Literal["ok", "timeout", "error"]
    value: Any = None
    detail: str = ""
    latency_s: float = 0.0


def default_size() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when its parent (the forkserver or the caller) dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker_main(conn, initializer: Callable[[], None] | None, memory_bytes: int | None) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if initializer is not None:
        initializer()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a function of the caller's __main__
            conn.send(("error", f"the call could not be loaded in the worker ({type(exc).__name__}"
                       f": {truncate(str(exc), 200)}); pool functions must be importable from a "
                       "module, not defined in the caller's __main__"))
            continue
        if msg is None:
            return
        fn, args = msg
        try:
            out = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller as an error outcome
            out = ("error", f"{type(exc).__name__}: {truncate(str(exc), 300)}")
        try:
            conn.send(out)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
            conn.send(("error", f"result could not be sent back: {type(exc).__name__}: {exc}"))


def _add_forkserver_preload(ctx, modules: Sequence[str]) -> None:
    """Add to (not replace) the modules the process-wide forkserver imports when it starts; a
    no-op once it runs. Other pools in the process may have asked for theirs."""
    from multiprocessing import forkserver

    current = list(getattr(forkserver._forkserver, "_preload_modules", None) or [])
    ctx.set_forkserver_preload(current + [m for m in modules if m not in current])


class _Worker:
    def __init__(self, ctx, initializer, memory_bytes: int | None) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main, args=(child, initializer, memory_bytes), daemon=True,
            name="scalerl-pool-worker",
        )
        with no_caller_main(this_thread=True):  # workers start from this module
            self.proc.start()
        child.close()

    def wait_ready(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            self.kill()
            raise RuntimeError(f"pool worker did not start within {timeout_s:.0f}s")
        try:
            self.conn.recv()
        except (EOFError, OSError) as exc:
            raise RuntimeError(f"pool worker died while starting ({self.exit_reason()})") from exc

    def exit_reason(self) -> str:
        self.proc.join(1.0)
        code = self.proc.exitcode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        self.proc.join(5.0)
        with contextlib.suppress(Exception):
            self.conn.close()


class Pool:
    """Worker processes that run `fn(*args)` under a hard wall-clock deadline per call.

    `fn` must be importable by reference (a module-level function of a module, not of the
    caller's `__main__`, which workers never run). `initializer` runs once per worker;
    `preload` names modules the forkserver imports once so new workers start warm.
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        initializer: Callable[[], None] | None = None,
        preload: Sequence[str] = (),
        start_method: str | None = None,
        memory_bytes: int | None = 2 << 30,
    ) -> None:
        self.size = default_size() if size is None else size
        if self.size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        method = start_method or (
            "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        )
        if method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method {method!r}: use 'forkserver' or 'spawn' (not fork)")
        self._ctx = mp.get_context(method)
        if method == "forkserver" and preload:
            _add_forkserver_preload(self._ctx, preload)
        self._initializer = initializer
        self._memory_bytes = memory_bytes
        self.replaced = 0
        """Workers killed (deadline) or found dead and replaced, over the pool's life."""
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._reserved = 0  # workers being started

    def _check_fork(self) -> None:
        """In a child made by fork(), forget the parent's workers (never talk to or kill them)
        and start its own by spawn: the stdlib's forkserver cannot be reused after a fork."""
        if os.getpid() != self._pid:
            self._reset()
            self._ctx = mp.get_context("spawn")

    # -- worker bookkeeping -------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        with self._cond:
            return [w.proc.pid for w in self._all if w.proc.pid is not None]

    def _checkout(self, want: int, block: bool) -> list[_Worker]:
        """Up to `want` workers: idle ones first, then new ones; blocks for one if `block`."""
        with self._cond:
            while True:
                got = [self._idle.pop() for _ in range(min(want, len(self._idle)))]
                n_new = min(want - len(got), self.size - len(self._all) - self._reserved)
                self._reserved += max(0, n_new)
                if got or n_new > 0 or not block:
                    break
                self._cond.wait()
        return got + self._start(max(0, n_new))

    def _start(self, n: int) -> list[_Worker]:
        started: list[_Worker] = []
        try:
            for _ in range(n):
                started.append(_Worker(self._ctx, self._initializer, self._memory_bytes))
            for w in started:
                w.wait_ready(START_TIMEOUT_S)
        except BaseException:
            for w in started:
                w.kill()
            with self._cond:
                self._reserved -= n
                self._cond.notify_all()
            raise
        with self._cond:
            self._reserved -= n
            self._all.update(started)
        return started

    def _release(self, workers: Sequence[_Worker]) -> None:
        with self._cond:
            self._idle.extend(w for w in workers if w in self._all)
            self._cond.notify_all()

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            if worker in self._all:
                self._all.discard(worker)
                self.replaced += 1
            self._cond.notify_all()

    # -- running calls --------------------------------------------------------------------------
    def run(self, fn: Callable, args: tuple, timeout_s: float) -> Outcome:
        return self.run_many(fn, [args], timeout_s)[0]

    def run_many(
        self, fn: Callable, arg_list: Sequence[tuple], timeout_s: float,
        affinity: Callable[[tuple], Hashable] | None = None,
    ) -> list[Outcome]:
        """Run `fn(*args)` for each args, concurrently; outcomes in input order. Never raises
        for a failing call (only for a pool that cannot start workers at all).

        `affinity(args)` names what a call could reuse from an earlier call in the same worker
        (e.g. a parsed gold answer): calls with the same key go to the same worker when that
        costs no parallelism."""
        if not arg_list:
            return []
        self._check_fork()
        run = _Run(self, fn, arg_list, timeout_s, affinity)
        held = self._checkout(min(len(arg_list), self.size), block=True)
        try:
            run.loop(held)
        finally:
            run.abandon()
        return run.results  # type: ignore[return-value]

    def shutdown(self) -> None:
        """Stop every worker (idle ones politely, busy ones by SIGKILL). The pool may be reused:
        the next call starts fresh workers."""
        self._check_fork()
        with self._cond:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._cond.notify_all()
        for w in workers:
            with contextlib.suppress(Exception):
                w.conn.send(None)
        deadline = time.monotonic() + 1.0
        for w in workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            w.kill()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class _Run:
    """The scheduling state of one `run_many` call, driven from the caller's thread."""

    def __init__(self, pool: Pool, fn: Callable, arg_list: Sequence[tuple], timeout_s: float,
                 affinity: Callable[[tuple], Hashable] | None):
        self.pool, self.fn, self.arg_list, self.timeout_s = pool, fn, arg_list, timeout_s
        self.results: list[Outcome | None] = [None] * len(arg_list)
        keys = [affinity(a) for a in arg_list] if affinity else [None] * len(arg_list)
        self.pending = _Pending(keys)
        self.busy: dict[Any, tuple[_Worker, int, float]] = {}
        self.held: list[_Worker] = []

    def loop(self, held: list[_Worker]) -> None:
        self.held = held
        while self.pending or self.busy:
            self._dispatch()
            if not self.busy:
                continue
            now = time.monotonic()
            next_deadline = min(t0 + self.timeout_s for _, _, t0 in self.busy.values())
            for conn in wait(list(self.busy), timeout=max(0.0, next_deadline - now)):
                self._collect(conn)
            self._expire()

    def _dispatch(self) -> None:
        if self.pending and not self.held:
            self.held = self.pool._checkout(len(self.pending), block=not self.busy)
        while self.pending and self.held:
            worker = self.held.pop()
            i = self.pending.take(worker)
            try:
                worker.conn.send((self.fn, self.arg_list[i]))
            except (OSError, ValueError):  # died while idle: retry the item on another worker
                self._drop(worker)
                self.pending.put_back(i)
                continue
            self.busy[worker.conn] = (worker, i, time.monotonic())

    def _collect(self, conn) -> None:
        worker, i, t0 = self.busy.pop(conn)
        try:
            status, value = conn.recv()
        except (EOFError, OSError):
            reason = worker.exit_reason()
            self._drop(worker)
            self.results[i] = Outcome(
                "error", detail=f"verifier worker pid {worker.proc.pid} died mid-check "
                f"({reason}); replaced", latency_s=time.monotonic() - t0)
            return
        latency = time.monotonic() - t0
        if status == "ok":
            self.results[i] = Outcome("ok", value=value, latency_s=latency)
        else:
            self.results[i] = Outcome("error", detail=str(value), latency_s=latency)
        self.held.append(worker)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn, (worker, i, t0) in list(self.busy.items()):
            if now - t0 >= self.timeout_s:
                del self.busy[conn]
                self._drop(worker)
                self.results[i] = Outcome(
                    "timeout", detail=f"deadline of {self.timeout_s:g}s passed; worker pid "
                    f"{worker.proc.pid} killed and replaced", latency_s=now - t0)

    def _drop(self, worker: _Worker) -> None:
        self.pending.home.pop(worker, None)
        self.pool._discard(worker)

    def abandon(self) -> None:
        """Hand back idle workers; kill any still busy (only on an exception in the caller)."""
        for worker, _, _ in self.busy.values():
            self.pool._discard(worker)
        self.busy.clear()
        self.pool._release(self.held)
        self.held = []


class _Pending:
    """Calls not yet sent, grouped by affinity key. A worker keeps drawing from the group it is
    on (so whatever it cached for that key is reused), moves to a group no other worker is on
    when its own runs out, and shares another's group rather than sit idle."""

    def __init__(self, keys: list[Hashable]) -> None:
        self.keys = keys
        self.groups: dict[Hashable, collections.deque[int]] = {}
        for i, key in enumerate(keys):
            self.groups.setdefault(key, collections.deque()).append(i)
        self.count = len(keys)
        self.home: dict[_Worker, Hashable] = {}

    def __len__(self) -> int:
        return self.count

    def take(self, worker: _Worker) -> int:
        key = self.home.get(worker, _NO_KEY)
        if key not in self.groups:
            others = {k for w, k in self.home.items() if w is not worker}
            free = (k for k in self.groups if k not in others)
            key = self.home[worker] = next(free, next(iter(self.groups)))
        queue = self.groups[key]
        i = queue.popleft()
        if not queue:
            del self.groups[key]
        self.count -= 1
        return i

    def put_back(self, i: int) -> None:
        self.groups.setdefault(self.keys[i], collections.deque()).appendleft(i)
        self.count += 1


_NO_KEY = object()
_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()


@atexit.register
def shutdown_all() -> None:
    """Shut down every pool of this process (at exit, or before a command's last line)."""
    for pool in list(_POOLS):
        pool.shutdown()
