"""Session-wide fixtures: the tiny model and ONE vLLM engine shared by every slow test.

`tiny_model_path` builds (or finds cached) the tiny model; `engine` starts one `Generator` on it
for the whole session (vLLM start-up is ~20-60 s on 2 cores). Tests that change the engine's
weights must put the original ones back (see tests/rollout/test_engine.py); its `version` may
therefore be above 0 when a test starts. Both fixtures are for tests marked `slow`.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from scalerl.tiny import ensure_tiny

    return str(ensure_tiny(log=lambda msg: None))


@pytest.fixture(scope="session")
def engine_config():
    from scalerl.rollout.engine_config import EngineConfig

    # Memory set explicitly: 1 GiB of KV cache, 10% of host memory, 1024-token sequences.
    return EngineConfig(dtype="float32", kv_cache_gib=1.0, memory_fraction=0.1,
                        max_model_len=1024, seed=0)


@pytest.fixture(scope="session")
def engine(tiny_model_path, engine_config):
    from scalerl.rollout.engine import Generator

    generator = Generator(tiny_model_path, config=engine_config)
    yield generator
    generator.close()
