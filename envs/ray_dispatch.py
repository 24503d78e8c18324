"""The driver's dispatch of grading requests over actors, without Ray: `Slot` (one actor as the
driver sees it) and `Dispatch` (which actor takes the next request, the in-flight cap, the
sessions placed, actors left out after a failure).

A request goes to the live actor with the fewest outstanding requests relative to its cap (ties:
the next in turn), a session to the one with the fewest sessions; at the cap every request
waits. An actor whose request failed is `suspect` (no new work) until the grader's ping says it
is back (`ok`) or `dropped`. envs/ray_grading.py `RayGrader` adds Ray (placing actors, sending
requests, pinging); no Ray import here.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class GradingLost(RuntimeError):
    """A request's grading actor died, was dropped or did not answer in time."""


class HostFailed(RuntimeError):
    """The grading actor answered that its node's sandbox (or session) failed."""


@dataclass
class Slot:
    """One grading actor as the driver sees it."""

    index: int
    handle: Any
    node_id: str
    node_ip: str
    cores: int
    cap: int
    """Requests it works on at once."""
    outstanding: int = 0
    sessions: int = 0
    state: str = "ok"
    """ok | suspect (left out until a ping answers) | dropped"""
    since: float = 0.0
    pid: int = 0
    info: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"grading actor {self.index} on node {self.node_ip} ({self.node_id[:8]})"


class Dispatch:
    """Slots, their loads and states, under one condition (module docstring)."""

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.closed = False
        self.lost = 0
        """Requests failed because their actor died or did not answer."""
        self._cond = threading.Condition()
        self._turn = 0

    def start(self) -> Any:
        """Make the slots (RayGrader places its actors here); nothing to do by default."""
        return self

    def take(self, slot: Slot | None = None, *, session: bool = False) -> Slot:
        """A place on `slot`, else on the least loaded live actor (the fewest sessions first
        with `session`); waits while every live actor is at its cap."""
        self.start()
        with self._cond:
            while True:
                if self.closed:
                    raise GradingLost("the Ray grader is closed")
                if slot is not None and slot.state != "ok":
                    raise GradingLost(f"{slot.name} was lost (restarted or dropped)")
                live = [s for s in self.slots if s.state == "ok"]
                if not live and all(s.state == "dropped" for s in self.slots):
                    raise GradingLost("no grading actor is left: every one was dropped")
                free = [s for s in ([slot] if slot else live) if s.outstanding < s.cap]
                if free:
                    self._turn += 1
                    n = len(self.slots)
                    chosen = min(free, key=lambda s: (
                        (s.sessions if session else s.outstanding) / s.cap,
                        (s.index - self._turn) % n))
                    chosen.outstanding += 1
                    chosen.sessions += session
                    return chosen
                self._cond.wait(timeout=1.0)

    def give(self, slot: Slot, *, closed_session: bool = False, taken: bool = True) -> None:
        """The place `take` gave back (and the session counted on it, when it closed)."""
        with self._cond:
            slot.outstanding -= taken
            if closed_session:
                slot.sessions = max(0, slot.sessions - 1)
            self._cond.notify_all()

    def session_closed(self, slot: Slot) -> None:
        self.give(slot, closed_session=True, taken=False)

    # --- failures --------------------------------------------------------------------------
    def _suspect(self, slot: Slot) -> None:
        with self._cond:
            self.lost += 1
            if slot.state == "ok":
                slot.state, slot.since = "suspect", time.monotonic()
                slot.sessions = 0  # a restarted actor holds none
                log.warning("%s failed; left out until it answers a ping", slot.name)
            self._cond.notify_all()

    def stats(self) -> dict[str, int]:
        """Actors by state and the requests lost to actor failures."""
        with self._cond:
            states = [s.state for s in self.slots]
            return {"actors": len(states), "ok": states.count("ok"),
                    "suspect": states.count("suspect"), "dropped": states.count("dropped"),
                    "lost": self.lost}
