"""A call waiting on the in-process engine ends at once when the engine's core dies.

vLLM resolves no control call (pause, reload, resume) of a core that died while it waited: the
caller would wait out its whole timeout (the weight timeout, 300 s), long past the death. A core
cannot be killed at a chosen instant of a control call on the shared engine without killing it
for every other test, so this test drives `EngineGenerator._call` with an engine whose death is
a flag and a call that never answers (the real kill is tests/e2e/test_preemption.py).
"""

import asyncio
import threading
import time

import pytest

from scalerl.rollout.base_generator import EngineDied
from scalerl.rollout.engine import DEATH_POLL_S, EngineGenerator

SLACK_POLLS = 8
"""Polls of slack on a loaded machine (a busy suite once took more than 4 on the second test)."""


class _Engine:
    errored = False


@pytest.fixture
def generator():
    gen = EngineGenerator.__new__(EngineGenerator)
    gen._loop = asyncio.new_event_loop()
    thread = threading.Thread(target=gen._loop.run_forever, daemon=True)
    thread.start()
    gen._llm = _Engine()
    yield gen
    gen._loop.call_soon_threadsafe(gen._loop.stop)
    thread.join(5)
    gen._loop.close()


async def _never():
    await asyncio.Event().wait()


def test_a_call_pending_when_the_core_dies_raises_engine_died_within_a_poll(generator):
    threading.Timer(0.3, lambda: setattr(generator._llm, "errored", True)).start()
    t = time.monotonic()
    with pytest.raises(EngineDied, match="while pausing generation"):
        generator._call(_never(), 30.0, "pausing generation")
    assert time.monotonic() - t < 0.3 + SLACK_POLLS * DEATH_POLL_S  # not the call's 30 s


def test_a_live_engine_still_times_out_and_still_returns(generator):
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="reading timed out after 0.5 s"):
        generator._call(_never(), 0.5, "reading")
    assert 0.5 <= time.monotonic() - t < 0.5 + SLACK_POLLS * DEATH_POLL_S

    async def answer():
        await asyncio.sleep(0.6)  # longer than one poll
        return 42
    assert generator._call(answer(), 5.0, "answering") == 42


def test_an_error_of_the_call_itself_passes_through(generator):
    async def fail():
        raise ValueError("bad weights")
    with pytest.raises(ValueError, match="bad weights"):
        generator._call(fail(), 5.0, "reloading")
