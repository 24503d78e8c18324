"""The client's control plane under faults it must survive: a control call (pause, label, reload,
...) that fails once is retried and the server keeps its place; one that keeps failing takes the
server out after its tries; and a client holding hundreds of connections under a 256 open-files
soft limit raises it and works, or, when the hard limit is 256 too, refuses with the `ulimit -n`
that fixes it (a real `ulimit` in a real shell, tests/rollout/many_connections.py). The servers
are `FakeServer`s (tests/rollout/fake_server.py): real HTTP servers on loopback whose routes fail
with HTTP 503 on demand, and that hold requests until all of them are in flight.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_server import FakeServer

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.fd_limit import fds_needed
from scalerl.rollout.server_generator import ServerGenerator


def update(gen: ServerGenerator, tmp_path: Path, version: int) -> None:
    gen._call(gen._update_all(tmp_path, version, 10.0, "test update"), 60, "the update")


def test_a_control_call_that_fails_once_is_retried_and_the_server_keeps_its_place(
        fake_servers, tiny_model_path, tmp_path):
    fake = fake_servers()
    gen = ServerGenerator(tiny_model_path, config=EngineConfig(servers=(fake.url,),
                                                               server_wait_s=10.0))
    try:
        v = gen.version
        joined_pauses = fake.calls.count("/pause")
        fake.failing.update({"/pause": 1, "/update_weight_version": 1, "/resume": 1})
        update(gen, tmp_path, v + 1)
        server = gen.pool.servers[0]
        assert server.up and server.lost == 0 and fake.label == str(v + 1)
        assert fake.calls.count("/pause") - joined_pauses == 2  # failed once, then answered
        assert gen.metrics()["servers/control_retries_total"] == 3.0
        async def one():
            return await gen._sample([5], 3, 1.0, 0)
        assert gen._call(one(), 30, "sampling").versions == [v + 1] * 3
    finally:
        gen.close()


def test_a_control_call_that_keeps_failing_takes_the_server_out_after_its_tries(
        fake_servers, tiny_model_path, tmp_path):
    bad, good = fake_servers(), fake_servers()
    gen = ServerGenerator(tiny_model_path, config=EngineConfig(
        servers=(bad.url, good.url), server_wait_s=10.0, server_timeout_s=20.0))
    try:
        v = gen.version
        joined_pauses = bad.calls.count("/pause")
        bad.failing["/pause"] = 100
        t = time.monotonic()
        update(gen, tmp_path, v + 1)
        took = time.monotonic() - t
        lost, kept = gen.pool.servers
        assert not lost.up and lost.lost == 1 and kept.up and good.label == str(v + 1)
        assert bad.calls.count("/pause") - joined_pauses == 4  # CONTROL_ATTEMPTS
        assert "/pause: HTTP 503" in lost.reason and "try 4 of at most 4" in lost.reason
        assert 3.5 <= took < 10  # backoff 0.5 + 1 + 2 s, well inside the 20 s budget
    finally:
        gen.close()


def test_the_descriptors_a_client_needs():
    # 5 servers x (190 requests + 2 spare + 16 control) + 512 for the rest of the process
    assert fds_needed(5, 190) == 5 * 208 + 512 == 1552
    assert fds_needed(1, 1) == 19 + 512


N = 600
"""Requests in flight at once: 2 servers x 300, each a connection, far past a 256 limit."""


def many_connections(ulimit: str, model: str, urls: list[str]) -> subprocess.CompletedProcess:
    script = Path(__file__).with_name("many_connections.py")
    return subprocess.run(["bash", "-c", f'ulimit {ulimit} 256 && exec "$@"', "bash",
                           sys.executable, str(script), model, str(N), *urls],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_hundreds_of_connections_under_a_256_soft_limit_work_or_refuse_with_the_fix(
        fake_servers, tiny_model_path):
    servers: list[FakeServer] = []

    async def hold(prompt: list[int], attempt: int) -> None:  # until all N are in flight
        deadline = time.monotonic() + 60
        while sum(s.in_flight for s in servers) < N and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    servers += [fake_servers(hold=hold), fake_servers(hold=hold)]
    urls = [s.url for s in servers]
    soft = many_connections("-Sn", tiny_model_path, urls)  # hard limit as it was
    assert soft.returncode == 0, soft.stderr[-3000:]
    out = json.loads(soft.stdout.splitlines()[-1])
    assert out["tokens"] == [[7, 7]] * N and out["lost"] == [0, 0] and out["reissued"] == 0
    assert out["limits"][0] >= fds_needed(2, N // 2)  # the soft limit was raised
    assert [s.most_in_flight for s in servers] == [N // 2, N // 2]  # all at once
    hard = many_connections("-n", tiny_model_path, urls)  # soft and hard 256
    assert hard.returncode != 0
    # 2 x (300 + 2 + 16) + 512 = 1148
    assert "needs up to 1148 open files, but RLIMIT_NOFILE's hard limit is 256: raise it " \
           "(`ulimit -n 1148`" in hard.stderr, hard.stderr[-3000:]


def test_a_server_given_up_on_is_not_retried_and_with_none_left_generation_stops_at_once(
        fake_servers, tiny_model_path):
    from scalerl.rollout.base_generator import GeneratorUnavailable
    from scalerl.rollout.server_pool import ServerGone

    class GivesUp(ServerGenerator):  # as LocalServerGenerator does once restarts run out
        async def _join(self, server):
            if server.joined:
                raise ServerGone(f"{server.url}: died too often")
            await super()._join(server)

    fake = fake_servers()
    gen = GivesUp(tiny_model_path, config=EngineConfig(servers=(fake.url,), server_wait_s=60.0))
    try:
        server = gen.pool.servers[0]

        async def lose_and_acquire():
            gen.pool.lose(server, "test: lost")
            await asyncio.wait_for(server.retry, 10)  # one try (after 1 s), then no more
            await gen.pool.acquire()

        t = time.monotonic()
        with pytest.raises(GeneratorUnavailable, match="every vLLM server is gone for good: "
                           r"http://127\.0\.0\.1:\d+: died too often"):
            gen._call(lose_and_acquire(), 30, "the scenario")
        assert time.monotonic() - t < 5 and server.gone  # not engine.server_wait_s (60 s)
    finally:
        gen.close()
