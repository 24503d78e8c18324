"""The turn rule (envs/turns.py `Play`): what an environment raises becomes a counted `error`,
and a rollout cancelled while its environment is still starting releases what the start made."""

from __future__ import annotations

import threading
import time

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.environment import EnvContext, Environment, Reply
from scalerl.envs.turns import EnvFailed, Play

SAMPLE = Sample(id="s", task="t", prompt="p")


class Slow(Environment):
    name = "slow"

    def __init__(self) -> None:
        self.closed: list[int] = []

    def start(self, sample, context):
        time.sleep(0.3)
        return 7

    def step(self, sample, transcript, state):
        return Reply(done=True)

    def close(self, state):
        self.closed.append(state)


def test_a_close_while_the_start_runs_closes_the_state_once_it_returns():
    env = Slow()
    play = Play(env, SAMPLE, EnvContext())
    failed: list[BaseException] = []

    def start():
        try:
            play.start()
        except EnvFailed as exc:
            failed.append(exc)

    t = threading.Thread(target=start)
    t.start()
    time.sleep(0.05)
    play.close()  # the rollout was cancelled: the start has not returned yet
    assert env.closed == []
    t.join()
    assert env.closed == [7] and failed and failed[0].ended == "env_error"
    play.close()
    assert env.closed == [7]  # once


def test_a_start_or_a_step_that_raises_is_an_env_error_naming_the_environment():
    class Broken(Slow):
        def start(self, sample, context):
            raise RuntimeError("no board")

    with pytest.raises(EnvFailed, match=r"environment 'slow': start raised RuntimeError: no "
                                        r"board") as err:
        Play(Broken(), SAMPLE, EnvContext()).start()
    assert err.value.score.status == "error"
