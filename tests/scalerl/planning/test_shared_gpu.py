"""An engine that shares a GPU with a trainer rank: vLLM 0.32 refuses to start when the free
memory is below gpu_memory_utilization x total (even with an explicit KV size), and the policy
is already there. The engine's fraction is therefore its own need over the total, and a layout
that cannot fit is refused before anything starts, in one line with the numbers. The model is
Qwen2.5-1.5B's published config.json on `meta`; only the GPU's memory query is stood in for
(`torch.cuda.mem_get_info`: no GPU here)."""

from __future__ import annotations

import pytest
import torch
from published_configs import QWEN25_1_5B, QWEN25_1_5B_PARAMS, write_config

from scalerl.config import load_config
from scalerl.planning.placement import Placement, PlacementError
from scalerl.training import room_for_engine, share_gpu

GIB = 2**30
ONE_GPU = Placement(train=("0",), generate=("0",))  # one GPU: trainer rank 0 and the engine


@pytest.fixture
def gpu(monkeypatch):
    memory = {"free": 80 * GIB, "total": 80 * GIB}
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda index=None: (memory["free"], memory["total"]))
    return memory


def config(path: str, *sets: str):
    return load_config("scalerl", [f"policy.model={path}", "engine.kv_cache_gib=8",
                                   "offpolicy.micro_batch_tokens=16384", *sets])


def test_the_engine_asks_for_its_own_need_not_a_share_of_the_whole_gpu(gpu, tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    cfg = share_gpu(config(path), ONE_GPU, path, ranks=1)
    # bf16 weights + 8 GiB of KV cache + 3 GiB for the engine's runtime, over 80 GiB
    need = 2 * QWEN25_1_5B_PARAMS + 8 * GIB + 3 * GIB
    assert cfg.engine.memory_fraction == pytest.approx(need / (80 * GIB))
    assert config(path).engine.memory_fraction == 0.9  # the recipe's: 72 GiB would be asked
    gpu["free"] = 80 * GIB - 30 * GIB  # the policy moved in
    room_for_engine(cfg.engine, ONE_GPU)


def test_a_shared_gpu_that_cannot_hold_both_is_refused_in_one_line(gpu, tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    with pytest.raises(PlacementError) as err:
        share_gpu(config(path, "engine.kv_cache_gib=70"), ONE_GPU, path, ranks=1)
    text = str(err.value)
    assert "\n" not in text and "GPU 0 is shared" in text and "80.0 GiB" in text
    assert "kv_cache 70.0" in text and "engine.kv_cache_gib" in text


def test_too_little_free_memory_at_engine_start_is_refused_with_the_numbers(gpu, tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    cfg = share_gpu(config(path), ONE_GPU, path, ranks=1)
    gpu["free"] = 10 * GIB
    with pytest.raises(PlacementError, match=r"GPU 0: 10.0 of 80.0 GiB free .* needs 13.9 GiB"):
        room_for_engine(cfg.engine, ONE_GPU)
