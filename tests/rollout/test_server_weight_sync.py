"""The NCCL weight transfer to vLLM servers, up to the NCCL group itself (which needs GPUs):
the group's world size counts every configured server, tensor-parallel ones included, even one
that joins late, and a server that never says its size is one line naming it; the transfer's
calls have the publisher's timeout, not a control call's. The servers are `FakeServer`s
(tests/rollout/fake_server.py): a real one cannot be made to answer late, never, or slowly."""

from __future__ import annotations

import time

import pytest
from fake_server import FakeServer

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_generator import ServerGenerator
from scalerl.rollout.server_pool import ServerError


def generator(path: str, servers: list[FakeServer], **kw) -> ServerGenerator:
    config = EngineConfig(servers=tuple(s.url for s in servers), weight_transfer="nccl",
                          server_timeout_s=kw.pop("server_timeout_s", 5.0), **kw)
    return ServerGenerator(path, config=config)


def test_the_group_waits_for_every_server_and_counts_each_ones_workers(fake_servers,
                                                                       tiny_model_path):
    fast, late = fake_servers(world_size=1), fake_servers(world_size=2, down_for_s=1.0)
    gen = generator(tiny_model_path, [fast, late], server_wait_s=30.0)
    try:
        _, world = gen.weight_sync_group()
        assert world == 1 + 1 + 2  # the trainer's sender, 1 worker, 2 tensor-parallel workers
        assert gen.weight_sync_client().offsets == [1, 2]
    finally:
        gen.close()


def test_a_server_started_with_data_parallelism_joins_with_every_ranks_workers(
        fake_servers, tiny_model_path):
    # `vllm serve --data-parallel-size 2 --tensor-parallel-size 2`: 4 workers, each joining
    # the group at rank offset + dp_rank x 2 + its TP rank (vLLM 0.32's
    # worker_init_process_group), so the server needs 4 ranks of the group, not 2
    plain, dp = fake_servers(world_size=1), fake_servers(world_size=2, data_parallel=2)
    gen = generator(tiny_model_path, [dp, plain], server_wait_s=30.0)
    try:
        _, world = gen.weight_sync_group()
        assert world == 1 + 2 * 2 + 1
        assert gen.weight_sync_client().offsets == [1, 5]  # the plain server after dp's 4
    finally:
        gen.close()


def test_a_server_that_never_says_its_world_size_is_one_line_naming_it(fake_servers,
                                                                       tiny_model_path):
    up, silent = fake_servers(), fake_servers(world_size_delay_s=-1)
    gen = generator(tiny_model_path, [up, silent], server_timeout_s=0.5, server_wait_s=2.0)
    try:
        start = time.monotonic()
        with pytest.raises(ServerError) as err:
            gen.weight_sync_group()
        assert time.monotonic() - start < 10
        text = str(err.value)
        assert "\n" not in text and silent.url in text and up.url not in text
        assert "/get_world_size" in text and "engine.server_wait_s" in text
    finally:
        gen.close()


def test_update_weights_gets_the_publishers_timeout_not_a_control_calls(fake_servers,
                                                                        tiny_model_path):
    from scalerl.trainer.publish import make_publisher

    slow = fake_servers(update_delay_s=1.5)  # the broadcast and load of a big model take minutes
    gen = generator(tiny_model_path, [slow], server_timeout_s=0.5, server_wait_s=10.0)
    try:
        publisher = make_publisher("nccl", gen, timeout_s=20.0)
        assert publisher.world_size == 2 and publisher.dtype.is_floating_point
        publisher.client.update_weights({"names": [], "dtype_names": [], "shapes": []})
        assert "/update_weights" in slow.calls
        publisher.abort()  # after a failed send: every server ends its workers' open reload
        # joining asked what the server computes with; the failed send ended its open reload
        assert slow.rpcs == ["scalerl_engine_info", "scalerl_abort_weight_update"]
    finally:
        gen.close()
