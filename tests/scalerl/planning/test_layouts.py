"""From a recipe to the throughput model and back: the workload a recipe asks for, the engine's
KV cache from its GPU (not a fixed 40 GiB) and max_num_seqs from that KV at the expected
context, the tensor parallelism a model needs, and the split of a node the model picks (Qwen3-8B's
published config.json on `meta`; the figures worked out by hand from the formulas)."""

from __future__ import annotations

import pytest
from published_configs import QWEN3_8B, QWEN3_8B_PARAMS, write_config

from scalerl.config import load_config
from scalerl.planning.layouts import (
    candidates,
    engine_settings,
    engine_tp,
    fastest,
    kv_bytes_from_gpu,
    size_engines,
    workload,
)
from scalerl.planning.placement import Layout, Placement, PlacementError, choose_layout, splits
from scalerl.planning.sizing import model_shape
from scalerl.planning.throughput import gpu_named

GIB = 2**30


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = write_config(tmp_path_factory.mktemp("qwen3-8b"), QWEN3_8B)
    return path, model_shape(path)


def test_the_workload_of_a_recipe():
    work = workload(load_config("scalerl"))
    # half the longest completion the budget allows: (12,288 thinking + 2,048 answer) / 2
    assert (work.rollouts_per_step, work.prompt_tokens, work.completion_tokens) == (
        768, 512, 7168)
    assert work.overlap and work.steps == 7400 and work.steps_per_publish == 1
    dapo = workload(load_config("dapo-qwen"), completion_tokens=3000, prompt_tokens=100)
    assert (dapo.rollouts_per_step, dapo.completion_tokens, dapo.prompt_tokens) == (
        1280, 3000, 100)
    assert not dapo.overlap and dapo.steps_per_publish == 8  # PPO-offpolicy-8


def test_the_kv_cache_fills_what_the_engine_gpu_has(qwen3):
    _, shape = qwen3
    e = load_config("scalerl").engine
    assert e.kv_cache_gib is None and e.max_num_seqs is None and e.memory_fraction == 0.9
    sized = engine_settings(shape, e, gpu_bytes=80 * GIB, context=4096)
    # 0.9 x 80 GiB less the bf16 weights (15.3 GiB) and the engine's 3 GiB runtime
    kv = int(0.9 * 80 * GIB - 2 * QWEN3_8B_PARAMS - 3 * GIB)
    assert sized.kv_cache_gib == pytest.approx(kv / GIB) == pytest.approx(53.74, abs=0.01)
    assert sized.max_num_seqs == kv // 147456 // 4096 == 95
    big = engine_settings(shape, e, gpu_bytes=141 * GIB, context=4096)
    assert big.kv_cache_gib == pytest.approx((0.9 * 141 * GIB - 2 * QWEN3_8B_PARAMS
                                              - 3 * GIB) / GIB)  # 108.6 GiB, not 40
    assert big.max_num_seqs == int(big.kv_cache_gib * GIB) // 147456 // 4096 == 193
    # a trainer rank on the same GPU takes its peak off first
    assert kv_bytes_from_gpu(shape, e, 80 * GIB, trainer_bytes=50 * GIB) == kv - 50 * GIB
    explicit = engine_settings(shape, e.__class__(kv_cache_gib=8.0, max_num_seqs=7),
                               gpu_bytes=80 * GIB, context=4096)
    assert (explicit.kv_cache_gib, explicit.max_num_seqs) == (8.0, 7)


def test_an_engine_gpu_that_holds_no_sequence_and_a_null_kv_without_a_gpu_are_one_line(qwen3):
    _, shape = qwen3
    e = load_config("scalerl").engine
    with pytest.raises(PlacementError, match="not one 16384-token sequence; raise "
                                             "engine.tensor_parallel_size"):
        engine_settings(shape, e, gpu_bytes=20 * GIB, context=4096)  # 18 GiB - 15.3 - 3
    with pytest.raises(PlacementError, match="there is no GPU: set engine.kv_cache_gib"):
        engine_settings(shape, e, gpu_bytes=0, context=4096)


def test_tensor_parallelism_only_where_the_weights_need_it(qwen3):
    _, shape = qwen3
    e = load_config("scalerl").engine
    assert engine_tp(shape, e, 80 * GIB) == 1
    # 24 GiB: 21.6 - 15.3 - 3 = 3.3 GiB holds one 16k sequence (16,384 x 144 KiB = 2.25 GiB)
    assert engine_tp(shape, e, 24 * GIB) == 1
    # 20 GiB: 18 - 15.3 - 3 < 0; TP 2: 18 - 7.6 - 3 = 7.4 GiB >= 16k x 72 KiB = 1.1 GiB
    assert engine_tp(shape, e, 20 * GIB) == 2


def test_the_splits_of_a_node_and_the_fastest_that_fits():
    assert [(s.ranks, s.engines) for s in splits(8, 1)] == [
        (1, 7), (2, 6), (3, 5), (4, 4), (5, 3), (6, 2), (7, 1)]
    assert [(s.ranks, s.engines) for s in splits(8, 2)] == [
        (1, 3), (2, 3), (3, 2), (4, 2), (5, 1), (6, 1)]
    assert [(s.ranks, s.engines) for s in splits(8, 1, engines=2)][-1] == (6, 2)
    steps = {1: 5.0, 2: 3.0, 3: 3.0, 4: 4.0}
    layouts = [Layout(r, 8 - r, 1) for r in steps]
    pick = choose_layout(layouts, fits=lambda lay: lay.ranks > 1, step_s=lambda lay:
                         steps[lay.ranks])
    assert pick == Layout(3, 5, 1)  # 2 and 3 tie at 3.0 s: more trainer ranks
    assert choose_layout(layouts, fits=lambda lay: False, step_s=lambda lay: 0.0) is None


def test_the_scalerl_recipe_on_eight_80gb_gpus_keeps_its_margin(qwen3):
    path, shape = qwen3
    cfg = load_config("scalerl", [f"policy.model={path}"])
    found = candidates(cfg, shape, gpus=8, gpu=gpu_named("H100-SXM"), gpu_bytes=80 * GIB,
                       work=workload(cfg))
    fits = {c.layout.ranks: c.fits for c in found}
    by_ranks = {c.layout.ranks: c for c in found}
    # FSDP2 over 1 or 2 ranks: 16 bytes x 8.19B / 2 = 61 GiB of state alone, plus the step;
    # over 3 the rank's 77.5 GiB and the FP32 head's fallback temporary (151,936 x 4,096 x 4
    # bytes = 2.32 GiB, plus its 5% of fragmentation) pass 0.9 x 80 = 72 GiB
    assert by_ranks[3].trainer_bytes > 79.8 * GIB
    assert fits == {1: False, 2: False, 3: False, 4: True, 5: True, 6: True, 7: True}
    best = fastest(found)
    assert best.layout == Layout(4, 4, 1)
    assert by_ranks[7].speed.trainer_idle > 0.85  # the old default: 7 trainer ranks, 1 engine
    # no margin: 3:5 fits the 80 GiB and is faster (5 engines bind, not 4)
    bare = load_config("scalerl", [f"policy.model={path}", "plan.memory_margin=0"])
    found = candidates(bare, shape, gpus=8, gpu=gpu_named("H100-SXM"), gpu_bytes=80 * GIB,
                       work=workload(bare))
    assert fastest(found).layout == Layout(3, 5, 1)
    assert fastest(found).speed.step_s < best.speed.step_s


def test_a_run_sizes_its_engines_as_placed(qwen3):
    path, _ = qwen3
    cfg = load_config("scalerl", [f"policy.model={path}"])
    placed = Placement(train=("0", "1", "2"), generate=("3", "4", "5", "6", "7"), engines=5)
    sized, line = size_engines(cfg, placed, path, 3, gpu_bytes=80 * GIB)
    e = sized.engine
    # 391,348 tokens of KV over the running sequences' 512 + 7168 x (4/3) / 2 = 5,290
    assert e.data_parallel_size == 5 and e.max_num_seqs == 391348 // 5290 == 73
    assert e.kv_cache_gib == pytest.approx((0.9 * 80 * GIB - 2 * QWEN3_8B_PARAMS - 3 * GIB)
                                           / GIB)
    assert line == ("engines: 5 x tensor_parallel_size 1, KV cache 53.7 GiB per GPU (of 80.0), "
                    "max_num_seqs 73")
    cpu, line = size_engines(load_config("tiny-cpu"), None, path, 1, gpu_bytes=0)
    assert cpu.engine.data_parallel_size == 1 and line == ""  # explicit: nothing to size
    with pytest.raises(PlacementError, match="there is no GPU"):
        size_engines(cfg, None, path, 1, gpu_bytes=0)
