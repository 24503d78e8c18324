"""The generator a run asks for: vLLM servers when `engine.servers` lists any, local servers
the run starts itself when `engine.data_parallel_size` > 1 (rollout/local_servers.py), else an
engine in this process. All honour one contract (rollout/base_generator.py `BaseGenerator`)."""

from __future__ import annotations

from scalerl.rollout.base_generator import BaseGenerator
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.scorer import Scorer


def make_generator(model_path: str, config: EngineConfig, *, scorer: Scorer,
                   fp32_head: bool = True, **kwargs) -> BaseGenerator:
    """A started generator for `model_path` (servers: connected, holding its weights) that renders
    and scores with `scorer` (the run's tasks and grading settings), writing tool calls in
    `config.tool_format` unless `tool_format=` says otherwise."""
    kwargs.setdefault("tool_format", config.tool_format)
    if config.servers:
        from scalerl.rollout.server_generator import ServerGenerator

        return ServerGenerator(model_path, config=config, fp32_head=fp32_head, scorer=scorer,
                               **kwargs)
    if config.local_servers:
        from scalerl.rollout.local_servers import LocalServerGenerator

        return LocalServerGenerator(model_path, config=config, fp32_head=fp32_head,
                                    scorer=scorer, **kwargs)
    from scalerl.rollout.engine import EngineGenerator

    return EngineGenerator(model_path, config=config, fp32_head=fp32_head, scorer=scorer,
                           **kwargs)
