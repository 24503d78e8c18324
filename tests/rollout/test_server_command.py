"""The vLLM server's command line and the choice of a server: no server is started here.

The command is checked by parsing it back with vLLM's own server parser: every engine argument
the in-process engine starts with must come out the same (a translation that drifted would start
a server with another engine). The choice of a server is a pure function of its state.
"""

from __future__ import annotations

import asyncio
import shlex

import pytest

from scalerl.cli import main
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_command import server_command
from scalerl.rollout.server_pool import Server, ServerPool


def parsed_engine_args(argv: list[str]):
    """vLLM's own reading of a server command line, as engine arguments."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    return args, AsyncEngineArgs.from_cli_args(args)


@pytest.mark.parametrize("config,gpu", [
    (EngineConfig(), False),
    (EngineConfig(dtype="bfloat16", max_model_len=4096, max_num_seqs=32, seed=7,
                  enforce_eager=True, enable_prefix_caching=False, chunked_prefill=True,
                  kv_cache_gib=3.0, memory_fraction=0.8, weight_transfer="nccl", log_stats=True),
     True),
])
def test_the_server_starts_with_the_in_process_engine_arguments(config, gpu):
    command = server_command(config, "/models/m", host="0.0.0.0", port=8123, gpu=gpu)
    assert command.argv[:2] == ("-m", "vllm.entrypoints.openai.api_server")
    args, engine = parsed_engine_args(list(command.argv[2:]))
    expected = config.vllm_kwargs("/models/m", fp32_head=True, gpu=gpu)
    for key, value in expected.items():
        if key != "kv_cache_memory_bytes" or value is not None:
            got = getattr(engine, key)
            assert (got if not hasattr(got, "backend") else {"backend": got.backend}) == value, key
    assert (args.host, args.port) == ("0.0.0.0", 8123)
    assert args.enable_scale_out and args.enable_prompt_tokens_details
    assert args.enable_server_load_tracking
    assert command.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert ("VLLM_CPU_KVCACHE_SPACE" in command.env) == (not gpu)


def test_serve_prints_a_plain_command_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    assert main(["serve", "--model", str(tmp_path), "--port", "8200", "--max-model-len", "512",
                 "--dtype", "bfloat16", "--device", "cpu", "--print-command"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[0] == "env" and "VLLM_SERVER_DEV_MODE=1" in words
    assert "VLLM_CPU_KVCACHE_SPACE=1" in words
    start = words.index("python")
    _, engine = parsed_engine_args(words[start + 3:])
    assert (engine.model, engine.max_model_len, engine.dtype) == (str(tmp_path), 512, "bfloat16")
    assert engine.hf_overrides == {"head_dtype": "float32"}


@pytest.mark.parametrize("flag,disabled", [((), True), (("--log-stats",), False)])
def test_serve_leaves_vllm_stats_off_unless_asked(capsys, tmp_path, flag, disabled):
    """vLLM's stats (its /metrics gauges) are off by default and on with --log-stats, as vLLM's
    own parser reads the printed command."""
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    assert main(["serve", "--model", str(tmp_path), "--device", "cpu", *flag,
                 "--print-command"]) == 0
    words = shlex.split(capsys.readouterr().out)
    _, engine = parsed_engine_args(words[words.index("python") + 3:])
    assert engine.disable_log_stats is disabled


def test_serve_refuses_a_bad_port_in_one_line(capsys, tmp_path):
    assert main(["serve", "--model", str(tmp_path), "--port", "70000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "scalerl serve: --port 70000: expected 1..65535"


def test_server_urls_are_checked_when_the_config_is_built():
    with pytest.raises(ValueError, match="'localhost:8000' is not a URL"):
        EngineConfig(servers=("localhost:8000",))
    with pytest.raises(ValueError, match="lists a server twice"):
        EngineConfig(servers=("http://a:1", "http://a:1"))
    with pytest.raises(ValueError, match="server_wait_s must be > 0"):
        EngineConfig(server_wait_s=0)


def pool_of(*outstanding: int, up: tuple[bool, ...] | None = None) -> ServerPool:
    pool = ServerPool(tuple(f"http://s{i}" for i in range(len(outstanding))), join=None,
                      timeout_s=1, request_timeout_s=1, wait_s=1, max_requests=8)
    for server, work, alive in zip(pool.servers, outstanding, up or (True,) * len(outstanding),
                                   strict=True):
        server.outstanding, server.up = work, alive
    return pool


def test_a_request_goes_to_the_up_server_with_the_least_outstanding_work():
    assert pool_of(40, 7, 12).pick().url == "http://s1"
    assert pool_of(40, 7, 12, up=(True, False, True)).pick().url == "http://s2"
    assert pool_of(5, 5).pick().url == "http://s0"  # ties: the first
    assert pool_of(1, 2, up=(False, False)).pick() is None


def test_the_rollouts_of_a_prompt_share_the_server_the_first_chose():
    pool = pool_of(3, 0)

    async def rollout(key: str) -> Server:
        with pool.affinity(key):
            server = pool.pick()
            server.outstanding += 10  # its request is running
            await asyncio.sleep(0)
            return pool.pick()  # its second phase

    async def go():
        return await asyncio.gather(*(rollout(k) for k in ("p", "p", "p", "q")))

    chosen = asyncio.run(go())
    assert [s.url for s in chosen[:3]] == ["http://s1"] * 3  # one prompt: one server
    assert chosen[3].url == "http://s0"  # the next prompt: the least loaded one then
    assert not pool._slots  # released when the last rollout of a key is done


def test_a_lora_server_serves_adapters_loaded_at_run_time(capsys, tmp_path):
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    assert main(["serve", "--model", str(tmp_path), "--lora-rank", "12", "--max-loras", "3",
                 "--device", "cpu", "--print-command"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in words
    _, engine = parsed_engine_args(words[words.index("-m") + 2:])
    # rank 12 is served at vLLM's next rank, 16; one more adapter kept than share a batch
    assert (engine.enable_lora, engine.max_loras, engine.max_cpu_loras,
            engine.max_lora_rank) == (True, 3, 4, 16)
    assert main(["serve", "--model", str(tmp_path), "--print-command"]) == 0
    assert "--enable-lora" not in capsys.readouterr().out
    assert main(["serve", "--model", str(tmp_path), "--lora-rank", "600", "--print-command"]) == 2
    assert "more than vLLM serves" in capsys.readouterr().err
