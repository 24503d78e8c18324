"""The generator a run asks for: vLLM servers when `engine.servers` lists any, else an engine in
this process. Both honour one contract (rollout/generator.py `BaseGenerator`)."""

from __future__ import annotations

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.generator import BaseGenerator


def make_generator(model_path: str, config: EngineConfig, *, fp32_head: bool = True,
                   **kwargs) -> BaseGenerator:
    """A started generator for `model_path` (servers: connected, holding its weights)."""
    if config.servers:
        from scalerl.rollout.server_generator import ServerGenerator

        return ServerGenerator(model_path, config=config, fp32_head=fp32_head, **kwargs)
    from scalerl.rollout.engine import Generator

    return Generator(model_path, config=config, fp32_head=fp32_head, **kwargs)
