"""Admission to one engine (rollout/admission.py) with real asyncio tasks: a bounded lane
(held-out validation beside training) holds at most its limit, and the training requests queued
behind it, at a later priority, pass it instead of waiting for the whole validation; the lane's
share and `val.engine_share` are checked."""

from __future__ import annotations

import asyncio

import pytest

from scalerl.rollout.admission import Bound, Lane, Slots, lane_scope
from scalerl.trainer.config import FieldError, ValConfig


def admission_order(lane: Bound | None) -> tuple[list[str], Slots]:
    """Capacity 2, both held by training requests; V1-V3 (priority 0, in `lane`) and T1-T3
    (priority 10) queue in that order. The holders then finish one at a time, oldest first;
    the order in which the waiters are admitted."""
    async def go():
        slots, order, holders = Slots(2), [], []

        async def request(name: str, priority: int, bound: Bound | None) -> None:
            lane_scope(bound)
            await slots.enter(priority)
            order.append(name)
            done = asyncio.Event()
            holders.append(done)
            try:
                await done.wait()
            finally:
                slots.leave()

        tasks = [asyncio.ensure_future(request(n, 10, None)) for n in ("Ta", "Tb")]
        await asyncio.sleep(0)
        tasks += [asyncio.ensure_future(request(f"V{i}", 0, lane)) for i in (1, 2, 3)]
        tasks += [asyncio.ensure_future(request(f"T{i}", 10, None)) for i in (1, 2, 3)]
        await asyncio.sleep(0)
        assert slots.waiting == 6
        for released in range(8):
            holders[released].set()
            while len(holders) < min(8, released + 3):  # the next waiter is admitted
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order[2:], slots

    return asyncio.run(go())


def test_a_bounded_lane_lets_the_training_requests_behind_it_pass():
    # worked by hand: Ta ends -> V1 (priority 0, lane empty); Tb ends -> V2's lane is full, T1;
    # V1 ends -> V2; T1 ends -> V3 waits, T2; V2 ends -> V3; T2 ends -> T3
    order, slots = admission_order(Bound("validation", 1))
    assert order == ["V1", "T1", "V2", "T2", "V3", "T3"]
    assert (slots.held, slots.lane_held, slots.lane_most, slots.most) == (
        0, {"validation": 0}, {"validation": 1}, 2)


def test_without_a_bound_validation_takes_every_slot_first():
    # what the lane fixes: priority 0 wins every freed slot until validation is done
    order, slots = admission_order(None)
    assert order == ["V1", "V2", "V3", "T1", "T2", "T3"]
    assert slots.lane_most == {}


def test_a_cancelled_lane_waiter_passes_its_turn_and_frees_nothing_twice():
    async def go():
        slots, bound = Slots(1), Bound("validation", 1)
        await slots.enter(5)  # a training request holds the only slot
        entered = []

        async def waiter(name: str) -> None:
            lane_scope(bound)
            await slots.enter(0)
            entered.append(name)
            slots.leave()

        first, second = (asyncio.ensure_future(waiter(n)) for n in ("a", "b"))
        await asyncio.sleep(0)
        first.cancel()
        slots.leave()
        await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 5)
        return entered, slots.held, slots.lane_held, slots.waiting

    assert asyncio.run(go()) == (["b"], 0, {"validation": 0}, 0)


def test_no_capacity_bounds_only_the_lane():
    # the in-process engine's admission: training requests never wait here
    async def go():
        slots = Slots(None)
        for _ in range(1000):
            await slots.enter(10)
        lane_scope(Bound("validation", 3))
        waiters = [asyncio.ensure_future(slots.enter(0)) for _ in range(5)]
        await asyncio.sleep(0)
        return slots.held, slots.lane_held["validation"], sum(w.done() for w in waiters)

    assert asyncio.run(go()) == (1003, 3, 3)


def test_a_lanes_limit_is_its_share_of_the_running_batch_and_at_least_one():
    assert Lane("validation", 0.25).limit(95) == 23  # floor(23.75)
    assert Lane("validation", 0.25).limit(256) == 64
    assert Lane("validation", 0.25).limit(2) == 1
    assert Lane("validation", 1.0).limit(7) == 7
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"share must be in \(0, 1\]"):
            Lane("validation", bad)


def test_val_engine_share_is_checked():
    with pytest.raises(FieldError, match=r"val.engine_share = 0.0: must be in \(0, 1\]"):
        ValConfig(engine_share=0.0)
    assert ValConfig().engine_share == 0.25
