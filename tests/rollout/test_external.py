"""rollout/external.py: an episode played elsewhere (a verifiers taskset's) becomes a Rollout.

A small stand-in generator (the fields the hook reads: a server pool, a tokenizer, the cache salt,
the version) and a stand-in environment whose `play` returns a Future: the Played it resolves to
becomes the rollout's tokens, logprobs, versions and turns; its failure, a timeout, or a
generator without servers is an `error` verdict, never a zero reward.
"""

import asyncio
import time
from concurrent.futures import Future
from types import SimpleNamespace

from scalerl.envs.adapters.verifiers_trace import Played, Segment, TraceError
from scalerl.envs.base import Sample, Score
from scalerl.rollout import turn as T
from scalerl.rollout.budget import rollout_seed
from scalerl.rollout.external import external_rollout
from scalerl.rollout.types import Budget

SAMPLE = Sample(id="s1", task="vf", prompt="2+2=")


class Tokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + t % 26) for t in ids)


class Pool:
    async def acquire(self):
        return SimpleNamespace(url="http://127.0.0.1:1")


def generator(pool=True):
    async def judge(sample, completion):
        return Score("wrong", "judged")
    return SimpleNamespace(pool=Pool() if pool else None, tokenizer=Tokenizer(),
                           model_path="/m", _salt="c0ffee", version=7, max_model_len=512,
                           think_close=(99,), _sampled_total=0, judge=judge)


class Env:
    timeout_s = 5.0

    def __init__(self, outcome):
        self.outcome, self.settings, self.cancelled = outcome, None, []

    def play(self, sample, **settings):
        self.settings = settings
        future = Future()
        if isinstance(self.outcome, Exception):
            future.set_exception(self.outcome)
        elif self.outcome is not None:
            future.set_result(self.outcome)
        return 41, future

    def cancel(self, rid):
        self.cancelled.append(rid)


PLAYED = Played(prompt=(1, 2), tokens=(3, 4, 30, 31, 5), logprobs=(-0.1, -0.2, None, None, -0.3),
                versions=(7, 7, 7, 7, 8), segments=(Segment("assistant", 0, 2, True),
                                                    Segment("user", 2, 4, False),
                                                    Segment("assistant", 4, 5, True)),
                finish="stop", ended="agent_completed", score=Score("correct", "r", reward=1.0),
                meta={"verifiers_stop": "agent_completed"})


BUDGET = Budget(answer=64)


def play(env, gen=None, score=True):
    gen = gen or generator()
    rollout = asyncio.run(external_rollout(gen, SAMPLE, 1, [1, 2], BUDGET,
                                           T.Sampling(1.0, 1.0, 3), 11, score, env))
    return rollout, gen


def test_a_played_episode_is_the_rollout_with_its_turns_versions_and_verdict():
    env = Env(PLAYED)
    rollout, gen = play(env)
    assert (rollout.prompt_token_ids, rollout.token_ids) == ((1, 2), (3, 4, 30, 31, 5))
    assert rollout.logprobs == PLAYED.logprobs and rollout.versions == PLAYED.versions
    assert [(t.role, t.text, t.trained) for t in rollout.turns] == [
        ("assistant", "de", True), ("user", "ef", False), ("assistant", "f", True)]
    assert rollout.score.status == "correct" and rollout.finish_reason == "stop"
    assert rollout.meta["ended"] == "agent_completed" and rollout.meta["turns"] == 2
    assert gen._sampled_total == 3
    assert env.settings["salt"] == "c0ffee-v7" and env.settings["priority"] == 6
    assert env.settings["seed"] == rollout_seed(11, "s1", 1)
    assert env.settings["sampling"]["max_tokens"] == 64


def test_without_the_tasksets_reward_the_judge_decides():
    rollout, _ = play(Env(Played(**{**PLAYED.__dict__, "score": None})))
    assert rollout.score.detail == "judged"


def test_a_failed_episode_is_an_error_verdict_not_a_zero_reward():
    rollout, _ = play(Env(TraceError("the verifiers runner exited with code 3: boom")))
    assert rollout.score.status == "error" and "exited with code 3" in rollout.score.detail
    assert rollout.token_ids == () and rollout.reward is None


def test_an_episode_past_its_timeout_is_cancelled_and_an_error():
    env = Env(None)  # never resolves
    env.timeout_s = 0.2
    t = time.perf_counter()
    rollout, _ = play(env)
    assert time.perf_counter() - t < 5
    assert rollout.score.status == "error" and "timeout_s" in rollout.score.detail
    assert env.cancelled == [41]


def test_the_in_process_engine_cannot_play_it_and_says_to_use_servers():
    env = Env(PLAYED)
    rollout, _ = play(env, gen=generator(pool=False))
    assert rollout.score.status == "error" and "--server" in rollout.score.detail
    assert env.settings is None
