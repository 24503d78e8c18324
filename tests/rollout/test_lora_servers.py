"""LoRA on two vLLM servers (slow: a pair of `scalerl serve --lora-rank 4` servers of its own,
~1.5-2 min to start on 2 cores; they live only for this module).

A published adapter is loaded on both servers; requests routed to either sample under their
version's adapter, matching the trainer's PEFT log-probs; a publish lands while requests run,
each finishing under its own adapter with exact per-token versions; a server that lost its
adapters (taken out, then rejoining) loads those in use before it takes requests again.
"""

from __future__ import annotations

import threading
import time

import pytest
from lora_models import SERVING, adapter_state, mismatch, peft_adapter
from tiny_rollouts import arith

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.lora import adapter_name
from scalerl.rollout.types import Budget

pytestmark = pytest.mark.slow

KL_BOUND = 1e-8  # as tests/rollout/test_lora_engine.py


@pytest.fixture(scope="module")
def lora_servers(tiny_model_path, tmp_path_factory):
    from serverset import ServerSet

    servers = ServerSet(tiny_model_path, 2, tmp_path_factory.mktemp("lora-servers"),
                        "--lora-rank", str(SERVING.rank), "--max-loras", str(SERVING.max_loras))
    try:
        servers.start_all()
        yield servers
    finally:
        left = servers.stop_all()
        assert not left, f"server processes left: {left}"


@pytest.fixture(scope="module")
def lora_gen(lora_servers, tiny_model_path, tmp_path_factory):
    from session_tasks import session_scorer

    from scalerl.rollout.server_generator import ServerGenerator

    config = EngineConfig(max_model_len=1024, servers=tuple(lora_servers.urls),
                          server_timeout_s=5.0, server_wait_s=60.0, lora=SERVING,
                          weights_dir=str(tmp_path_factory.mktemp("lora-weights")))
    generator = ServerGenerator(tiny_model_path, config=config, scorer=session_scorer())
    yield generator
    generator.close()


def loaded(gen, server) -> set[str]:
    models = gen._call(gen.pool.call(server, "GET", "/v1/models"), 30, "listing models")
    return {card["id"] for card in models["data"][1:]}


def test_an_adapter_is_loaded_on_both_servers_and_each_matches_peft(lora_gen, tiny_model_path):
    one, two = peft_adapter(tiny_model_path, 1), peft_adapter(tiny_model_path, 2)
    t = time.perf_counter()
    timings = lora_gen.update_adapter(adapter_state(one).items(), 1)
    print(f"\nadapter publish on 2 servers: {time.perf_counter() - t:.3f} s {timings}")
    assert all(loaded(lora_gen, s) == {adapter_name(1)} for s in lora_gen.pool.servers)
    before = {s.url: s.sampled for s in lora_gen.pool.servers}
    got = lora_gen.generate(arith(12), n=2, budget=Budget(thinking=16, answer=24),
                            temperature=0.7, seed=3, score=False)
    assert all(s.sampled > before[s.url] for s in lora_gen.pool.servers)  # both served some
    assert {v for r in got for v in r.versions} == {1}
    kl, worst, count = mismatch(got, {1: one}, 0.7)
    wrong, _, _ = mismatch(got, {1: two}, 0.7)
    print(f"servers: mismatch KL {kl:.3e} max|dlogp| {worst:.3e} over {count} tokens; "
          f"against another adapter {wrong:.3e}")
    assert count > 100 and kl <= KL_BOUND and worst <= 1e-3 and wrong > 1e-3


def test_a_publish_lands_while_requests_run_on_the_servers(lora_gen, tiny_model_path):
    old = lora_gen.version
    models = {old: peft_adapter(tiny_model_path, 1), old + 1: peft_adapter(tiny_model_path, 3)}
    results = []

    def consume():
        results.extend(lora_gen.stream(arith(8), n=2, budget=Budget(thinking=96, answer=32),
                                       temperature=1.0, seed=5, score=False))

    worker = threading.Thread(target=consume)
    worker.start()
    deadline = time.monotonic() + 120
    while not lora_gen.adapters().get(old) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)  # some tokens sampled under the old adapter
    lora_gen.update_adapter(adapter_state(models[old + 1]).items(), old + 1)
    during = lora_gen.adapters()
    worker.join(timeout=300)
    assert len(results) == 16
    assert during.get(old, 0) > 0, during
    assert old in {v for r in results for v in r.versions}
    kl, worst, count = mismatch(results, models, 1.0)
    print(f"\nin-flight publish on servers: adapters during it {during}; mismatch KL {kl:.3e} "
          f"max|dlogp| {worst:.3e} over {count} tokens")
    assert kl <= KL_BOUND and worst <= 1e-3
    assert set(lora_gen.adapters()) == {old + 1}
    deadline = time.monotonic() + 30  # the old one is unloaded from both servers
    while (any(loaded(lora_gen, s) != {adapter_name(old + 1)} for s in lora_gen.pool.servers)
           and time.monotonic() < deadline):
        time.sleep(0.1)
    assert all(loaded(lora_gen, s) == {adapter_name(old + 1)} for s in lora_gen.pool.servers)


def test_a_rejoining_server_loads_the_adapters_in_use_first(lora_gen, tiny_model_path):
    version = lora_gen.version
    server = lora_gen.pool.servers[0]
    lora_gen._call(lora_gen.pool.call(server, "POST", "/v1/unload_lora_adapter",
                                      body={"lora_name": adapter_name(version)},
                                      text=True), 30, "unload")
    assert loaded(lora_gen, server) == set()
    async def lose():  # on the generator's loop, as its own calls do
        lora_gen.pool.lose(server, "test: lost its adapters")

    lora_gen._call(lose(), 30, "taking the server out")
    assert not server.up
    deadline = time.monotonic() + 60
    while not server.up and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.up and loaded(lora_gen, server) == {adapter_name(version)}
    got = lora_gen.generate(arith(6), n=2, budget=Budget(thinking=8, answer=8),
                            temperature=0.7, seed=1, score=False)
    assert {v for r in got for v in r.versions} == {version}
