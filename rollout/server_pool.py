"""Several vLLM servers behind one client: choosing one, watching them, losing and rejoining one.

`ServerPool` holds one aiohttp session (asyncio like the generator's own loop, one connection
pool for hundreds of concurrent requests, a timeout on every call) and the state of each server.
A request goes to the up server with the least outstanding work (tokens asked for and not yet
returned); the requests made under one `affinity` key (the n rollouts of a prompt) go to the
server the first of them chose, so its prefix cache serves the rest. At most `max_requests`
generation requests are in flight on one server; the others wait here (`Slots`,
rollout/admission.py), lowest `priority` first, a bounded lane's (held-out validation) no more
than its share, and their waiting counts toward no timeout.

Liveness is `/health`, probed every PROBE_EVERY_S with the control timeout. A control call (the
probe, pause, reload, label, resume, ...) to a server that is up is retried (`control`: up to
CONTROL_ATTEMPTS tries, CONTROL_BACKOFF_S doubling in between, all within the call's own timeout)
before the server is declared lost; a server that still fails is taken out: its requests raise
`ServerError` so the caller issues them elsewhere, and a rejoin task retries it with exponential
backoff through the owner's `join(server)` (which puts the current weights on it) before it gets
requests again. A generation request that fails on its own (no reply within `request_timeout_s` of
being sent, a reset connection, a 5xx) first probes `/health`: when it answers, only that request
fails (`RequestFailed`, the caller issues it again) and the server keeps its place and its other
requests; a slow request never takes a healthy server out. `acquire` waits at most `wait_s` for a
usable server, then raises GeneratorUnavailable naming each server and why it is out; at once when
every server is gone for good (`ServerGone`: the owner will not bring it back). Connections are
bounded per server (the request cap plus spares; rollout/fd_limit.py) and the soft open-files limit
is raised to hold them at start (refused, with the fix, when the hard limit is too low). No weights
and no tokens here (rollout/server_generator.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from scalerl.rollout.admission import Slots
from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.rollout.fd_limit import open_sessions

logger = logging.getLogger(__name__)

PROBE_EVERY_S = 2.0
"""Seconds between health probes of each up server."""
BACKOFF_S = (1.0, 30.0)
"""First wait before retrying a lost server, and the longest (doubling in between)."""
CONTROL_ATTEMPTS = 4
"""Tries of a control call to an up server before it is declared lost (a refused connection, a
5xx or a timeout each count; a 4xx is the call's fault and is not retried)."""
CONTROL_BACKOFF_S = 0.5
"""Wait before a control call's second try, doubling before each next one (0.5, 1, 2 s)."""


class ServerError(RuntimeError):
    """A server failed a call: unreachable, timed out, a 5xx reply, or an answer that shows it is
    not in the state this client put it in. The message names the server and the call."""


class ServerGone(ServerError):
    """Raised by the owner's `join`: the server will not come back (e.g. a local server that died
    too often); it is not retried any more."""


class RequestRejected(RuntimeError):
    """A server refused a request itself (4xx): the request is wrong, not the server."""


class RequestFailed(RuntimeError):
    """One generation request failed (timed out, its connection dropped, a 5xx) on a server
    whose `/health` still answers: the request is issued again, the server keeps its place."""


@dataclass(eq=False)
class Server:
    """One vLLM server and what this client knows of it."""

    url: str
    index: int
    up: bool = False
    reason: str = "not connected yet"
    """Why it is out (empty while up)."""
    stale: bool = True
    """Its requests are not this client's any more (it was lost, not merely left behind by a
    weight update): they are aborted when it rejoins."""
    outstanding: int = 0
    """Tokens asked of it and not yet returned."""
    requests: set[asyncio.Future] = field(default_factory=set)
    slots: Slots = field(default_factory=lambda: Slots(1))
    """Its generation requests in flight (the pool sets the capacity)."""
    probe: asyncio.Future | None = None
    """The health probe under way after a request failed (shared by every failed request)."""
    failed: int = 0
    """Generation requests that failed on it while its /health answered."""
    sampled: int = 0
    """Tokens it returned (the owner counts them)."""
    world_size: int | None = None
    """Workers of its engine (tensor x pipeline x data parallel), for NCCL rank offsets; None
    until it answered `/get_world_size`."""
    lost: int = 0
    joined: int = 0
    retry: asyncio.Task | None = None
    gone: bool = False
    """Given up on for good (`ServerGone`)."""


_SLOT: contextvars.ContextVar[list | None] = contextvars.ContextVar("server_slot", default=None)


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ServerPool:
    """The servers of one generator, on its event loop."""

    def __init__(self, urls: tuple[str, ...], *, join: Callable[[Server], Awaitable[None]],
                 timeout_s: float, request_timeout_s: float, wait_s: float,
                 max_requests: int) -> None:
        self.servers = [Server(url.rstrip("/"), i, slots=Slots(max_requests))
                        for i, url in enumerate(urls)]
        self.timeout_s, self.request_timeout_s, self.wait_s = (
            timeout_s, request_timeout_s, wait_s)
        self._join = join
        self._slots: dict[Any, list] = {}
        self._session = None
        self._watcher: asyncio.Task | None = None
        self._some_up = asyncio.Event()
        self._closed = False
        self.control_retries = 0
        """Control calls tried again after a failure."""

    async def start(self) -> None:
        """Open the sessions, try every server once (at once), keep retrying those that failed,
        and start probing the joined ones."""
        cap = self.servers[0].slots.capacity  # connections bounded per server, the open-files
        self._session, self._control = open_sessions(len(self.servers), cap)  # limit raised
        joined = await asyncio.gather(*(self._attempt(s) for s in self.servers))
        for server, ok in zip(self.servers, joined, strict=True):
            if not ok:
                server.retry = asyncio.ensure_future(self._rejoin(server, BACKOFF_S[0]))
        self._watcher = asyncio.ensure_future(self._watch())

    # ---- calls ----------------------------------------------------------------------------
    async def control(self, server: Server, method: str, path: str, *,
                      timeout_s: float | None = None, **kwargs: Any) -> Any:
        """`call`, retried while `server` is up: up to CONTROL_ATTEMPTS tries with backoff, all
        within `timeout_s` (the call's budget; each try gets what is left of it). A server that
        is not up (joining, or taken out meanwhile) is not retried here: its rejoin retries it
        as a whole. The last ServerError when every try failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout_s or self.timeout_s)
        for attempt in range(CONTROL_ATTEMPTS):
            try:
                return await self.call(server, method, path, timeout_s=max(
                    0.1, deadline - loop.time()), **kwargs)
            except ServerError as exc:
                if attempt == 0 and not server.up:
                    raise  # not retried: its error as it came
                wait = CONTROL_BACKOFF_S * 2 ** attempt
                if (not server.up or attempt + 1 == CONTROL_ATTEMPTS
                        or loop.time() + wait >= deadline):
                    raise ServerError(f"{exc} (try {attempt + 1} of at most "
                                      f"{CONTROL_ATTEMPTS})") from exc
                self.control_retries += 1
                logger.warning("%s; trying again in %.1f s", exc, wait)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def call(self, server: Server, method: str, path: str, *, body: Any = None,
                   params: dict | None = None, timeout_s: float | None = None,
                   session: Any = None, read_timeout_s: float | None = None,
                   text: bool = False) -> Any:
        """One control call (a fresh connection; `session`: another); its JSON reply (None when
        empty; `text`: the reply as text, e.g. vLLM's LoRA routes answer in plain text).
        ServerError on any failure of the server, RequestRejected on a 4xx reply. `timeout_s`
        bounds the whole call; with `read_timeout_s` it bounds the connection only and the reply
        may take up to `read_timeout_s` without a byte."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        if read_timeout_s is not None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s or self.timeout_s,
                                            sock_read=read_timeout_s)
        where = f"{server.url}: {method} {path}"
        try:
            async with (session or self._control).request(
                    method, server.url + path, json=body, params=params,
                    timeout=timeout) as reply:
                answer = await reply.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ServerError(f"{where}: {describe(exc)}") from exc
        if reply.status >= 500:
            raise ServerError(f"{where}: HTTP {reply.status}: {answer[:300]}")
        if reply.status >= 400:
            raise RequestRejected(f"{where}: HTTP {reply.status}: {answer[:300]}")
        if text:
            return answer
        return json.loads(answer) if answer else None

    async def generate(self, server: Server, body: Callable[[], Awaitable[dict]], work: int,
                       priority: int = 0) -> dict:
        """One generation request on `server` (counted as `work` outstanding tokens meanwhile),
        sent once one of its slots is free (lowest `priority` first) with the body `body()`
        gives then. ServerError if the server fails or is taken out meanwhile; RequestFailed if
        the request failed but the server's /health answers (it stays up, its other requests
        go on)."""
        try:
            return await self.tracked(server, self._send(server, body, priority), work)
        except ServerError as exc:
            if server.up and await self.healthy(server):
                server.failed += 1
                raise RequestFailed(f"{exc} (its /health answers: it keeps its place and the "
                                    "request is issued again)") from exc
            raise

    async def _send(self, server: Server, body: Callable[[], Awaitable[dict]],
                    priority: int) -> dict:
        await server.slots.enter(priority)
        try:
            return await self.call(server, "POST", "/inference/v1/generate", body=await body(),
                                   read_timeout_s=self.request_timeout_s,
                                   session=self._session)
        finally:
            server.slots.leave()

    async def healthy(self, server: Server) -> bool:
        """Whether `server` answers `/health` within the control timeout (one probe at a time
        per server, shared by everyone asking meanwhile)."""
        if server.probe is None or server.probe.done():
            server.probe = asyncio.ensure_future(self.call(server, "GET", "/health"))
        try:
            await asyncio.shield(server.probe)
        except (ServerError, RequestRejected):
            return False
        return True

    async def tracked(self, server: Server, call: Awaitable, work: int = 0) -> Any:
        """Await `call` on `server` as one of its requests: ServerError if the server is taken
        out meanwhile (a hung server's calls end when its health probe fails, not at their own
        timeouts)."""
        server.outstanding += work
        task = asyncio.ensure_future(call)
        server.requests.add(task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # our caller was cancelled: drop the request (vLLM
            task.cancel()               # aborts it when the connection closes)
            raise
        finally:
            server.requests.discard(task)
            server.outstanding -= work
        if task.cancelled():
            raise ServerError(f"{server.url}: taken out while a request ran ({server.reason})")
        return task.result()

    # ---- choosing a server ----------------------------------------------------------------
    @contextlib.contextmanager
    def affinity(self, key: Any) -> Iterator[None]:
        """Requests made inside (in this task) go to the server that the first request under
        `key` chose, while it is up and any holder of `key` is still inside."""
        slot = self._slots.setdefault(key, [None, 0])
        slot[1] += 1
        token = _SLOT.set(slot)
        try:
            yield
        finally:
            _SLOT.reset(token)
            slot[1] -= 1
            if slot[1] == 0:
                self._slots.pop(key, None)

    def pick(self) -> Server | None:
        """The affinity slot's server if up, else the up server with the least outstanding
        work (None when none is up)."""
        slot = _SLOT.get()
        if slot is not None and slot[0] is not None and slot[0].up:
            return slot[0]
        live = [s for s in self.servers if s.up]
        if not live:
            return None
        best = min(live, key=lambda s: (s.outstanding, s.index))
        if slot is not None:
            slot[0] = best
        return best

    async def acquire(self) -> Server:
        """A usable server, waiting up to `wait_s` for one; GeneratorUnavailable after that."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while (server := self.pick()) is None:
            left = deadline - loop.time()
            if left <= 0:
                raise GeneratorUnavailable(
                    f"no vLLM server usable for {self.wait_s:.0f} s (engine.server_wait_s): "
                    + "; ".join(s.reason if s.reason.startswith(s.url) else
                                f"{s.url}: {s.reason}" for s in self.servers))
            if all(s.gone for s in self.servers):
                raise GeneratorUnavailable("every vLLM server is gone for good: " + "; ".join(
                    s.reason for s in self.servers))
            self._some_up.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._some_up.wait(), left)
        return server

    async def wait_up(self) -> None:
        """Return once a server is up; GeneratorUnavailable after `wait_s`."""
        await self.acquire()

    @property
    def up(self) -> list[Server]:
        return [s for s in self.servers if s.up]

    # ---- losing and rejoining -------------------------------------------------------------
    def lose(self, server: Server, reason: str, *, stale: bool = True) -> None:
        """Take `server` out (no new requests) and retry it with backoff. `stale`: it failed, so
        its running requests are given up (their callers issue them elsewhere); otherwise (it
        kept older weights) they finish where they are."""
        if not server.up:
            server.stale = server.stale or stale
            return
        server.up, server.reason, server.stale = False, reason, stale
        server.lost += 1
        if stale:
            for task in list(server.requests):
                task.cancel()
        logger.warning("vLLM server %s is out (%s); retrying it with backoff", server.url, reason)
        server.retry = asyncio.ensure_future(self._rejoin(server, first_wait=BACKOFF_S[0]))

    async def _rejoin(self, server: Server, first_wait: float) -> None:
        wait = first_wait
        while not self._closed and not server.gone:
            await asyncio.sleep(wait)
            if await self._attempt(server):
                return
            wait = min(2 * wait, BACKOFF_S[1])

    async def _attempt(self, server: Server) -> bool:
        """One try at joining `server` (the owner's `join`); False, with the reason kept."""
        try:
            await self._join(server)
        except Exception as exc:  # noqa: BLE001 - kept as the reason it is out, shown later
            server.reason = str(exc) if isinstance(exc, ServerError) else describe(exc)
            if isinstance(exc, ServerGone):
                server.gone = True
                logger.error("vLLM server %s is given up on: %s", server.url, exc)
                self._some_up.set()  # waiters see that every server may be gone
            return False
        server.up, server.reason, server.stale, server.retry = True, "", False, None
        server.joined += 1
        if server.joined > 1:
            logger.warning("vLLM server %s rejoined", server.url)
        self._some_up.set()
        return True

    async def _watch(self) -> None:
        """Probe every up server's /health; one that fails or does not answer is taken out."""
        while not self._closed:
            await asyncio.sleep(PROBE_EVERY_S)
            live = self.up
            results = await asyncio.gather(*(self.control(s, "GET", "/health") for s in live),
                                           return_exceptions=True)
            for server, result in zip(live, results, strict=True):
                if isinstance(result, Exception):
                    self.lose(server, f"health probe failed: {result}")

    def counts(self) -> dict[str, float]:
        return {"servers/up": float(len(self.up)),
                "servers/lost_total": float(sum(s.lost for s in self.servers)),
                "servers/requests_failed_total": float(sum(s.failed for s in self.servers)),
                "servers/rejoined_total": float(sum(max(0, s.joined - 1)
                                                    for s in self.servers)),
                "servers/control_retries_total": float(self.control_retries)}

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in [self._watcher, *(s.retry for s in self.servers)] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            await self._control.close()
