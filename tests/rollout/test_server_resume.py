"""A resumed run on a changed `engine.servers` list (a server replaced, one added): the run's
generator is new, joins every listed server afresh, and its first publish (the checkpoint's
weights, `hand_weights` in trainer/loop.py `restore`) reaches each one before it answers a
request, the added one included when it comes up only after that publish (it joins with the
current weights). The servers are `FakeServer`s (tests/rollout/fake_server.py), which record the
weights and version label each request was answered with; a few seconds.
"""

from __future__ import annotations

import asyncio

import torch

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_generator import ServerGenerator
from scalerl.rollout.weights import checkpoint_shapes

CHECKPOINT_STEP = 4
"""The version the resumed run publishes first: its checkpoint's step."""


def test_every_server_of_a_changed_list_serves_the_checkpoint_weights_from_its_first_request(
        fake_servers, tiny_model_path, tmp_path):
    async def hold(prompt: list[int], attempt: int) -> None:
        await asyncio.sleep(0.2)  # requests stay in flight, so the least-loaded pick spreads them

    kept, replacement = fake_servers(hold=hold), fake_servers(hold=hold)
    added = fake_servers(hold=hold, down_for_s=3.0)  # still starting when the run publishes
    config = EngineConfig(servers=(kept.url, replacement.url, added.url), server_wait_s=10.0,
                          weights_dir=str(tmp_path))
    gen = ServerGenerator(tiny_model_path, config=config)
    try:
        shapes = checkpoint_shapes(tiny_model_path)
        gen.update_weights(((n, torch.zeros(s)) for n, s in shapes.items()), CHECKPOINT_STEP)
        assert len(gen.pool.up) == 2  # the added server was not up for the publish

        async def once_all_up_sample():
            while len(gen.pool.up) < 3:
                await asyncio.sleep(0.05)
            return await asyncio.gather(*(gen._sample([60 + i], 4, 1.0, 0) for i in range(12)))

        samples = gen._call(once_all_up_sample(), 60, "sampling on three servers")
        assert all(s.versions == [CHECKPOINT_STEP] * 4 for s in samples)
        loaded = str(gen._loaded_dir)
        assert loaded.endswith(f"v{CHECKPOINT_STEP:06d}")
        for fake in (kept, replacement, added):
            assert fake.served, f"{fake.url} got no request"
            assert set(fake.served) == {(str(CHECKPOINT_STEP), loaded)}, fake.served
    finally:
        gen.close()
