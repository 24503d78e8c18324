"""Servers under load and faults, as the client sees them: a slow request on a healthy server is
issued again alone (the server keeps its place and its other requests), a server that stops
answering `/health` is taken out and its requests run elsewhere, no server ever has more than
`engine.server_max_requests` requests in flight, and those waiting go lowest priority first. The
servers are `FakeServer`s (tests/rollout/fake_server.py): a real one cannot be made to hold one
request past a timeout while it answers `/health`. Each test takes a few seconds.
"""

from __future__ import annotations

import asyncio

import pytest
from fake_server import FakeServer

from scalerl.rollout import server_pool
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_generator import ServerGenerator


@pytest.fixture
def generators():
    made: list[ServerGenerator] = []

    def make(path: str, fakes: list[FakeServer], **kw) -> ServerGenerator:
        config = EngineConfig(servers=tuple(f.url for f in fakes), server_wait_s=10.0, **kw)
        made.append(ServerGenerator(path, config=config))
        return made[-1]

    yield make
    for gen in made:
        gen.close()


def run(gen: ServerGenerator, *requests: tuple[list[int], int]) -> list[list[int]]:
    """Sample 4 tokens after each (prompt, priority) at once; each one's tokens."""
    async def go():
        return await asyncio.gather(*(gen._sample(p, 4, 1.0, 0, priority=q) for p, q in requests))
    return [s.tokens for s in gen._call(go(), 60, "sampling")]


async def until(condition, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


SLOW = (1, 2, 3)


def test_a_slow_request_on_a_healthy_server_is_issued_again_alone(fake_servers, generators,
                                                                  tiny_model_path):
    # The cascade: a request past its timeout took the whole server out, aborting
    # every other request on it. SLOW's first try never answers; the others are answered once
    # SLOW came again, so they are in flight when SLOW's 2 s run out.
    async def hold(prompt: list[int], attempt: int) -> None:
        if tuple(prompt) == SLOW:
            if attempt == 0:
                await asyncio.sleep(60)  # until the client drops it
            return
        await until(lambda: fake.attempts[SLOW] == 2)

    fake = fake_servers(hold=hold)
    gen = generators(tiny_model_path, [fake], server_timeout_s=1.0,
                     server_request_timeout_s=2.0)
    others = [(10 + i, 11) for i in range(5)]

    async def scenario():
        slow = asyncio.ensure_future(gen._sample(list(SLOW), 4, 1.0, 0))
        await until(lambda: fake.attempts[SLOW] == 1)
        await asyncio.sleep(1.0)  # halfway through SLOW's 2 s
        rest = [gen._sample(list(p), 4, 1.0, 0) for p in others]
        return await asyncio.gather(slow, *rest)

    results = gen._call(scenario(), 60, "the scenario")
    assert [r.tokens for r in results] == [[7] * 4] * 6
    server = gen.pool.servers[0]
    assert server.up and server.lost == 0 and gen.reissued == 1
    assert fake.dropped == [SLOW]  # the others were never aborted ...
    assert fake.attempts == {SLOW: 2, **{p: 1 for p in others}}  # ... nor sent twice
    assert gen.metrics()["servers/requests_failed_total"] == 1.0


def test_a_server_that_stops_answering_health_is_lost_and_its_requests_run_elsewhere(
        fake_servers, generators, tiny_model_path, monkeypatch):
    monkeypatch.setattr(server_pool, "PROBE_EVERY_S", 0.2)
    go = []

    async def hold(prompt: list[int], attempt: int) -> None:
        await until(lambda: go)

    a, b = fake_servers(hold=hold), fake_servers(hold=hold)
    gen = generators(tiny_model_path, [a, b], server_timeout_s=0.5)
    prompts = [(30 + i,) for i in range(8)]

    async def scenario():
        tasks = [asyncio.ensure_future(gen._sample(list(p), 4, 1.0, 0)) for p in prompts]
        await until(lambda: a.in_flight == 4 and b.in_flight == 4)  # least work: 4 each
        a.hang()  # as if SIGSTOPped: /health and its running requests never answer
        go.append(True)
        return await asyncio.gather(*tasks)

    results = gen._call(scenario(), 60, "the scenario")
    on_a = set(a.attempts)
    assert [r.tokens for r in results] == [[7] * 4] * 8
    lost, kept = gen.pool.servers
    assert not lost.up and lost.lost == 1 and kept.up and kept.lost == 0
    assert "health probe failed" in lost.reason and gen.reissued == 4
    assert sorted(b.answered) == sorted(prompts)  # A's 4 ran on B, once each
    assert all(b.attempts[p] == 1 for p in on_a) and len(on_a) == 4


def test_no_server_has_more_than_its_cap_in_flight(fake_servers, generators, tiny_model_path):
    async def hold(prompt: list[int], attempt: int) -> None:
        await asyncio.sleep(0.05)

    fakes = [fake_servers(hold=hold), fake_servers(hold=hold)]
    gen = generators(tiny_model_path, fakes, server_max_requests=3)
    prompts = [[40 + i] for i in range(20)]
    assert run(gen, *((p, 0) for p in prompts)) == [[7] * 4] * 20
    assert [f.most_in_flight for f in fakes] == [3, 3]  # at the cap, never above it
    assert [s.slots.most for s in gen.pool.servers] == [3, 3]
    assert sum(len(f.answered) for f in fakes) == 20


def test_waiting_requests_go_lowest_priority_first_and_carry_it(fake_servers, generators,
                                                                tiny_model_path):
    queued = []

    async def hold(prompt: list[int], attempt: int) -> None:
        if prompt == [50]:
            await until(lambda: queued)

    fake = fake_servers(hold=hold)
    gen = generators(tiny_model_path, [fake], server_max_requests=1)
    slots = gen.pool.servers[0].slots

    async def scenario():
        first = asyncio.ensure_future(gen._sample([50], 4, 1.0, 0))
        await until(lambda: fake.in_flight == 1)
        rest = [asyncio.ensure_future(gen._sample([60 + p], 4, 1.0, 0, priority=p))
                for p in (5, 1, 3)]
        await until(lambda: slots.waiting == 3)
        queued.append(True)
        return await asyncio.gather(first, *rest)

    gen._call(scenario(), 60, "the scenario")
    assert fake.answered == [(50,), (61,), (63,), (65,)]
    assert fake.priorities == [0, 1, 3, 5]


def test_a_request_that_waited_through_an_update_is_sent_under_the_new_version(
        fake_servers, generators, tiny_model_path, tmp_path):
    # its cache salt names the version it is sent under, so it never reuses KV cached under
    # the weights before the update (docs/scale-out.md, No stale prefix cache)
    release = []

    async def hold(prompt: list[int], attempt: int) -> None:
        if prompt == [70]:
            await until(lambda: release)

    fake = fake_servers(hold=hold)
    gen = generators(tiny_model_path, [fake], server_max_requests=1)
    v = gen.version

    async def scenario():
        first = asyncio.ensure_future(gen._sample([70], 4, 1.0, 0))
        await until(lambda: fake.in_flight == 1)
        queued = asyncio.ensure_future(gen._sample([71], 4, 1.0, 0))
        await until(lambda: gen.pool.servers[0].slots.waiting == 1)
        await gen._update_all(tmp_path, v + 1, 5.0, "test update")
        release.append(True)
        return await asyncio.gather(first, queued)

    first, queued = gen._call(scenario(), 60, "the scenario")
    assert (first.versions, queued.versions) == ([v + 1] * 4, [v + 1] * 4)  # the fake's label
    assert [s.rsplit("-", 1)[1] for s in fake.salts] == [f"v{v}", f"v{v + 1}"]


def test_a_continuation_after_an_update_keeps_its_first_phases_salt(
        fake_servers, generators, tiny_model_path, tmp_path):
    # as in-process (rollout/engine.py): the server cached the prompt and first phase under
    # that salt; a rollout that starts after the update gets the new version's
    from scalerl.envs.base import Sample
    from scalerl.rollout.types import Budget

    release = []

    async def hold(prompt: list[int], attempt: int) -> None:
        if prompt == [80, 81]:  # the first phase, until the update is done
            await until(lambda: release)

    fake = fake_servers(hold=hold)
    gen = generators(tiny_model_path, [fake])
    v, budget = gen.version, Budget(thinking=4, answer=4)
    sample = Sample(id="s", task="arith", prompt="")

    async def scenario():
        old = asyncio.ensure_future(gen._rollout(sample, 0, [80, 81], budget, 1.0, 0, False))
        await until(lambda: fake.in_flight == 1)
        await gen._update_all(tmp_path, v + 1, 5.0, "test update")
        release.append(True)
        await old
        await gen._rollout(sample, 0, [90], budget, 1.0, 0, False)

    gen._call(scenario(), 60, "the scenario")
    assert [p[0] for p in fake.answered] == [80, 80, 90, 90]  # two phases each
    assert [s.rsplit("-", 1)[1] for s in fake.salts] == [f"v{v}", f"v{v}", f"v{v + 1}",
                                                         f"v{v + 1}"]


def test_a_waiter_that_gives_up_passes_its_turn_on():
    async def go():
        slots, order = server_pool.Slots(1), []
        await slots.enter(0)  # this task holds the only slot

        async def waiter(name: str, priority: int) -> None:
            await slots.enter(priority)
            try:
                order.append(name)
            finally:
                slots.leave()

        tasks = {n: asyncio.ensure_future(waiter(n, p)) for n, p in (("b", 1), ("c", 2),
                                                                     ("d", 3))}
        await asyncio.sleep(0)
        assert slots.waiting == 3
        tasks["b"].cancel()  # gave up while waiting
        slots.leave()  # hands the slot to "c" ...
        tasks["c"].cancel()  # ... cancelled before it runs: its turn goes to "d"
        await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 5)
        return order, slots.held, slots.waiting

    assert asyncio.run(go()) == (["d"], 0, 0)


def test_the_cap_and_timeouts_are_checked(tiny_model_path):
    with pytest.raises(ValueError, match=r"EngineConfig.server_max_requests must be >= 1"):
        EngineConfig(server_max_requests=0)
    assert EngineConfig(max_num_seqs=8).requests_per_server == 16
    assert EngineConfig(max_num_seqs=None).requests_per_server == 2048
