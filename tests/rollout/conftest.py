"""Fixtures of the rollout tests that fake a vLLM server (tests/rollout/fake_server.py)."""

from __future__ import annotations

import pytest
from fake_server import FakeServer


@pytest.fixture
def fake_servers(tiny_model_path):
    """`make(**kw)` starts a FakeServer over the tiny model; every one made is closed after."""
    made: list[FakeServer] = []

    def make(**kw) -> FakeServer:
        made.append(FakeServer(tiny_model_path, **kw))
        return made[-1]

    yield make
    for server in made:
        server.close()
