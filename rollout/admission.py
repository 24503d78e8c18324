"""Admission of generation requests to one engine: a slot cap, priority order, and lanes.

`Slots` admits at most `capacity` requests at once to one engine (a server's
`engine.server_max_requests`; unbounded for the in-process engine, whose own `max_num_seqs`
queue orders them); waiters enter lowest `priority` first, then in the order they came, and a
cancelled waiter leaves the queue. Waiting here counts toward no request timeout: a server
request's timeout starts when it is sent (rollout/server_pool.py).

A lane bounds one kind of request within that: a `generate` call made with `lane=Lane(name,
share)` (held-out validation on the training engines, `val.engine_share`) has its requests
admitted under the name `name`, at most `limit` of them on one engine at once, where `limit` is
`share` of the engine's running batch (its `max_num_seqs`; `Lane.limit`). A request of a
lane at its limit waits even while slots are free, and the requests queued behind it (training
rollouts, whatever their priority) pass it: validation at priority 0 would otherwise take every
slot as it frees and starve the training requests, which then time out on a server and are
issued again from scratch. (vLLM itself keeps a preempted request's output: under KV pressure it
frees the blocks of the running request with the largest (priority, arrival) and recomputes them
when it is scheduled again, vllm/v1/core/sched/scheduler.py `_preempt_request`; what lost that
work was the client's timeout and reissue.) The lane of a request is read from the context of
the task that enters (`lane_scope`, set once per `generate` call; asyncio tasks inherit it).
Nothing here sends a request or knows vLLM.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Lane:
    """A kind of request whose share of each engine is bounded."""

    name: str
    share: float
    """Most fraction of an engine's running batch (`max_num_seqs`) its requests hold at once."""

    def __post_init__(self) -> None:
        if not (isinstance(self.share, int | float) and 0 < self.share <= 1):
            raise ValueError(f"lane {self.name!r}: share must be in (0, 1], got {self.share!r}")

    def limit(self, running: int) -> int:
        """Requests of this lane one engine may hold, of its `running` batch: at least one."""
        return max(1, math.floor(self.share * running))


@dataclass(frozen=True)
class Bound:
    """A lane resolved for one generator's engines: its name and per-engine limit."""

    name: str
    limit: int


_LANE: contextvars.ContextVar[Bound | None] = contextvars.ContextVar("admission_lane",
                                                                    default=None)


def lane_scope(bound: Bound | None) -> None:
    """Requests entered from this task and the tasks it starts go in `bound`'s lane."""
    _LANE.set(bound)


def current_lane() -> Bound | None:
    return _LANE.get()


class Slots:
    """At most `capacity` holders at once (None: no cap), each lane at most its limit; waiters
    enter lowest `priority` first among those whose lane has room, then in the order they came
    (a cancelled waiter leaves the queue)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = math.inf if capacity is None else capacity
        self.held, self.most = 0, 0
        """`most`: the largest number ever held at once."""
        self.lane_held: dict[str, int] = {}
        self.lane_most: dict[str, int] = {}
        """Per lane: held now, and the most ever held at once."""
        self._queues: dict[str | None, list[tuple[int, int, Bound | None, asyncio.Future]]] = {}
        """Waiters per lane name (None: no lane), each a heap by (priority, arrival)."""
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(not e[3].done() for queue in self._queues.values() for e in queue)

    def _room(self, lane: Bound | None) -> bool:
        return self.held < self.capacity and (
            lane is None or self.lane_held.get(lane.name, 0) < lane.limit)

    def _take(self, lane: Bound | None) -> None:
        self.held += 1
        self.most = max(self.most, self.held)
        if lane is not None:
            n = self.lane_held[lane.name] = self.lane_held.get(lane.name, 0) + 1
            self.lane_most[lane.name] = max(self.lane_most.get(lane.name, 0), n)

    async def enter(self, priority: int = 0) -> None:
        lane = current_lane()
        if self._room(lane):  # (a waiter with room exists only until `_admit` runs)
            self._take(lane)
            return
        fut = asyncio.get_running_loop().create_future()
        queue = self._queues.setdefault(None if lane is None else lane.name, [])
        heapq.heappush(queue, (priority, next(self._order), lane, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot as it was cancelled
                self.leave()
            raise

    def leave(self) -> None:
        """Free this task's slot (and its lane's) and admit the first waiters that now fit."""
        lane = current_lane()
        self.held -= 1
        if lane is not None:
            self.lane_held[lane.name] -= 1
        self._admit()

    def _admit(self) -> None:
        """While a slot is free: the first waiter, by (priority, arrival), among the lanes with
        room (a full lane's waiters are passed, not popped)."""
        while self.held < self.capacity:
            heads = []
            for queue in self._queues.values():
                while queue and queue[0][3].done():  # cancelled while waiting
                    heapq.heappop(queue)
                if queue and self._room(queue[0][2]):
                    heads.append(queue)
            if not heads:
                return
            queue = min(heads, key=lambda q: q[0][:2])
            _, _, lane, fut = heapq.heappop(queue)
            self._take(lane)
            fut.set_result(None)
