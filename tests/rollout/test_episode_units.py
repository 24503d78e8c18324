"""The episode's limits and failures on a scripted backend (fast), and the trainer's mask and
gradient on a multi-turn rollout.

The backend here is scripted (it returns the tokens a test asks for, as `_sample` would) so the
limits that the real tiny model reaches only by chance (a turn cut exactly at max_model_len, an
observation that would not fit) are hit every time; the tokenizer is the real tiny one. The
same paths through real vLLM are tests/rollout/test_episode.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

from scalerl.envs.base import Score
from scalerl.envs.catalog import get_task
from scalerl.envs.environment import EnvContext, Environment, Reply, SessionFailed, Turn
from scalerl.rollout import budget as B
from scalerl.rollout import episode as E
from scalerl.rollout.base_generator import Sampled
from scalerl.rollout.scorer import Scorer
from scalerl.rollout.turn import Sampling
from scalerl.rollout.types import INTERRUPTION_PHRASE, Budget, Rollout


class Delta:
    name, stop, tool_names = "delta", (), None

    def template_tools(self, schemas):
        return None

    def delta_text(self, tokenizer, messages, last_turn_text, template_kwargs=None, tools=()):
        return "".join(f"\nT:{m['content']}" for m in messages) + "\nA:"


class Scripted:
    """A backend whose `sample` returns `reply(max_tokens)` tokens (and records each call):
    the generator's public turn interface (rollout/turn.py `Backend`)."""

    def __init__(self, tokenizer, max_model_len: int, reply) -> None:
        self.tokenizer, self.max_model_len, self.reply = tokenizer, max_model_len, reply
        self.think_close = tuple(tokenizer.encode("</think>", add_special_tokens=False))
        self.version, self.calls = 3, []
        self.scorer = Scorer([get_task("arith")])

    async def sample(self, prompt, max_tokens, temperature, seed, top_p=1.0, priority=0,
                     stop=()):
        self.calls.append((len(prompt), max_tokens))
        tokens, ended = self.reply(max_tokens)
        return Sampled(tokens, [-0.5] * len(tokens), [self.version] * len(tokens), ended)

    def phrase_ids(self, phrase):
        return tuple(self.tokenizer.encode(phrase, add_special_tokens=False))

    def system_prompt(self, task):
        return self.scorer.system_prompt(task)

    async def judge(self, sample, completion):
        return await asyncio.wrap_future(self.scorer.submit(sample, completion))

    def render(self, messages, tools=()):
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)


class Env(Environment):
    name = "unit_env"
    max_turns = 5

    def __init__(self, obs="ok", raises=None, start_raises=None):
        self.obs, self.raises, self.start_raises, self.closed = obs, raises, start_raises, 0

    def start(self, sample, context):
        if self.start_raises:
            raise self.start_raises
        return {}

    def step(self, sample, transcript, state):
        if self.raises:
            raise self.raises
        return Reply(done=False, messages=({"role": "tool", "content": self.obs},))

    def close(self, state):
        self.closed += 1


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def play(backend, env, budget, prompt_len=50) -> Rollout:
    sample = get_task("arith").samples("test")[0]
    with ThreadPoolExecutor(4) as pool:
        episode = E.Episode(backend, sample, 0, [5] * prompt_len, budget, Sampling(1.0), 0, env,
                            EnvContext(tool_format=Delta()), pool)
        return asyncio.run(E.run_episode(episode, score=False))


def test_a_turn_is_cut_at_max_model_len_and_never_asks_past_it(tokenizer):
    a = tokenizer.encode("a", add_special_tokens=False)
    backend = Scripted(tokenizer, 200, lambda n: (a * n, False))  # never stops by itself
    r = play(backend, Env(), Budget(thinking=None, answer=500, total=10_000))
    assert backend.calls == [(50, 150)]  # room: 200 - 50, not the answer budget
    assert r.meta["ended"] == "max_model_len" and r.finish_reason == "truncated"
    assert len(r.token_ids) == 150


def test_an_observation_that_would_not_fit_ends_the_episode_before_it(tokenizer):
    eos = tokenizer.eos_token_id
    backend = Scripted(tokenizer, 120, lambda n: ([7, 8, 9, eos], True))
    env = Env(obs="w" * 30)  # 36 tokens with "\nT:" and "\nA:"
    r = play(backend, env, Budget(thinking=None, answer=40, total=10_000))
    # 50 + 4 + 36 = 90, +4 = 94, +36 = 130 > 120: two turns, one observation
    assert [t.role for t in r.turns] == ["assistant", "tool", "assistant"]
    assert r.meta["ended"] == "max_model_len" and len(r.token_ids) == 4 + 36 + 4
    assert backend.calls == [(50, 40), (90, 30)]  # the second turn's cap: 120 - 90
    assert r.versions == (3,) * len(r.token_ids)
    assert env.closed == 1


def test_the_thinking_budget_and_interruption_apply_to_each_turn(tokenizer):
    x = tokenizer.encode("x", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    phrase = tokenizer.encode(INTERRUPTION_PHRASE, add_special_tokens=False)
    replies = itertools.cycle([(x * 6, False), ([eos], True)])  # thinks on, then stops
    backend = Scripted(tokenizer, 1000, lambda n: next(replies))
    r = play(backend, Env(), Budget(thinking=6, answer=5, total=10_000))
    assistant = [t for t in r.turns if t.role == "assistant"]
    assert len(assistant) == Env.max_turns and r.meta["ended"] == "max_turns"
    for t in assistant:  # each: 6 sampled, the phrase forced (no logprob), then EOS
        ids, lps = r.token_ids[t.start:t.end], r.logprobs[t.start:t.end]
        assert list(ids) == x * 6 + phrase + [eos]
        assert [lp is None for lp in lps] == [False] * 6 + [True] * len(phrase) + [False]
    assert backend.calls[:2] == [(50, 6), (50 + 6 + len(phrase), 5)]
    assert r.interrupted and r.thinking_tokens == 5 * (6 + len(phrase))
    assert r.answer_tokens == 5 and r.meta["observation_tokens"] == 4 * 8  # "\nT:ok\nA:"


def test_environment_failures_are_error_verdicts_and_close_runs(tokenizer):
    eos = tokenizer.eos_token_id
    backend = Scripted(tokenizer, 1000, lambda n: ([7, eos], True))
    env = Env(raises=ValueError("bad state"))
    r = play(backend, env, Budget(thinking=None, answer=40))
    assert r.meta["ended"] == "env_error" and r.score.status == "error"
    assert r.score.detail == ("environment 'unit_env': step raised ValueError: bad state")
    assert env.closed == 1
    env = Env(raises=SessionFailed("sandbox gone"))
    r = play(backend, env, Budget(thinking=None, answer=40))
    assert (r.meta["ended"], r.score.detail) == ("session_failed",
                                                 "tool session failed: sandbox gone")
    env = Env(start_raises=SessionFailed("cannot start"))
    r = play(backend, env, Budget(thinking=None, answer=40))
    assert r.meta["ended"] == "session_failed" and r.token_ids == () and env.closed == 0


def test_pure_limits():
    budget = Budget(thinking=10, answer=20, total=1000)
    assert E.first_turn_cap(budget, 5) == 35
    assert E.first_turn_cap(Budget(thinking=None, answer=20, total=8), 5) == 8
    plan = E.turn_plan(budget, 5, 0, room=12)
    assert (plan.thinking, plan.cap) == (10, 12) and B.first_phase_tokens(plan) == 10
    assert E.ending_after_cut(40, 100, 1024, 1024) == "max_model_len"
    assert E.ending_after_cut(100, 100, 500, 1024) == "budget"
    assert E.ending_after_cut(40, 100, 500, 1024) == "turn_budget"
    assert E.finish_reason("max_turns", "stop") == "truncated"
    assert E.finish_reason("done", "interrupted") == "interrupted"
    assert E.finish_reason("session_failed", None) == "stop"


def multi_turn_rollout() -> Rollout:
    # assistant 4 tokens (one forced), tool 3, assistant 2
    turns = (Turn("assistant", "", 0, 4, True), Turn("tool", "", 4, 7, False),
             Turn("assistant", "", 7, 9, True))
    return Rollout(sample_id="s", task="arith", prompt_token_ids=(1, 2, 3),
                   token_ids=(5, 6, 7, 8, 9, 10, 11, 12, 13),
                   logprobs=(-1.0, None, -0.5, -2.0, None, None, None, -0.3, -0.1),
                   versions=(0,) * 9, finish_reason="stop", thinking_tokens=0, answer_tokens=6,
                   completion="", score=Score("correct"), reward=1.0, turns=turns)


@pytest.mark.parametrize("loss", ["cispo", "grpo", "dapo", "gspo"])
def test_environment_tokens_get_no_gradient(loss):
    from scalerl.trainer.batch import collate
    from scalerl.trainer.losses import aggregate, get_loss, loss_kwargs

    r = multi_turn_rollout()
    other = dataclasses.replace(r, sample_id="s", score=Score("wrong"), reward=-1.0, group=1)
    batch = collate([[r, other]], normalise="none", aggregation="token", pad_id=0)
    row = [i for i in range(2) if batch.advantages[i, 0] > 0][0]
    trained = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert batch.mask[row].tolist() == trained
    logprobs = (batch.old_logprobs - 0.1).clone().requires_grad_(True)
    spec = get_loss(loss)
    per_token, _ = spec.fn(logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                           **loss_kwargs(loss, {}))
    aggregate(per_token, batch.weights).backward()
    grad = logprobs.grad[row].tolist()
    assert all(g == 0.0 for g, m in zip(grad, trained, strict=True) if not m)
    assert all(g != 0.0 for g, m in zip(grad, trained, strict=True) if m)


def test_turn_metrics():
    from scalerl.trainer.metrics import rollout_metrics

    r = multi_turn_rollout()
    calls = ({"turn": 0, "name": "python", "code": "", "status": "ok", "output": "",
              "latency_s": 0.5, "truncated": False},
             {"turn": 0, "name": "python", "code": "", "status": "timeout", "output": "",
              "latency_s": 1.5, "truncated": False})
    r = dataclasses.replace(r, task="arith_tool", tool_calls=calls,
                            meta={"ended": "max_model_len"})
    single = dataclasses.replace(multi_turn_rollout(), turns=())
    m = rollout_metrics([[r, single]])
    assert m["rollout/turns_mean"] == 1.5  # 2 assistant turns and 1
    assert m["rollout/tool_calls_mean"] == 1.0
    assert m["rollout/tool_error_frac"] == 0.5 and m["tool/latency_s"] == 1.0
    assert m["train/arith_tool/turns_mean"] == 2.0 and m["train/arith_tool/tool_calls_mean"] == 2
    assert "train/arith/turns_mean" not in m  # a single-turn task adds no per-task keys
    assert m["rollout/ended_max_model_len_frac"] == 0.5 and m["rollout/ended_budget_frac"] == 0
    assert not any(k.startswith("rollout/ended_done") for k in m)
    m = rollout_metrics([[single]])
    assert (m["rollout/turns_mean"], m["rollout/tool_calls_mean"]) == (1.0, 0.0)
    assert "rollout/tool_error_frac" not in m and "tool/latency_s" not in m
    assert not any(k.startswith("rollout/ended_") for k in m)


class EnvTask:
    """A task of the scorer: `arith`'s samples and judge, with an environment."""

    def __init__(self, env):
        self.base, self.environment = get_task("arith"), env
        self.name, self.system_prompt = "arith", self.base.system_prompt

    def score(self, sample, completion, grading):
        return self.base.score(sample, completion, grading)


def test_servers_play_episodes_token_in_with_stop_strings(tiny_model_path, tokenizer):
    """The server client's requests (a FakeServer to join; generation answered here): each turn
    is the prompt plus every token so far, with the format's stop strings kept."""
    from fake_server import FakeServer

    from scalerl.rollout.engine_config import EngineConfig
    from scalerl.rollout.server_generator import ServerGenerator

    env = Env()
    env.max_turns = 2
    fake = FakeServer(tiny_model_path)
    fmt = Delta()
    fmt.stop = ("}",)
    gen = ServerGenerator(tiny_model_path, scorer=Scorer({"arith": EnvTask(env)}),
                          config=EngineConfig(servers=(fake.url,), server_wait_s=10.0),
                          env_context=EnvContext(tool_format=fmt))
    try:
        assert gen.env_context().tool_format is fmt  # the run's context, as handed in
        bodies, eos = [], tokenizer.eos_token_id

        async def generate(server, body, work, priority=0):
            bodies.append(await body())
            return {"choices": [{"finish_reason": "stop", "token_ids": [7, 8, eos],
                                 "logprobs": {"content": [{"logprob": -0.5}] * 3},
                                 "weight_versions": [{"version": str(gen.version), "start": 0,
                                                      "end": 3}]}]}

        gen.pool.generate = generate
        sample = get_task("arith").samples("test")[0]
        [r] = gen.generate([sample], n=1, budget=Budget(thinking=None, answer=16), score=False)
    finally:
        gen.close()
        fake.close()
    obs = tokenizer.encode("\nT:ok\nA:", add_special_tokens=False)
    prompt = list(r.prompt_token_ids)
    assert [b["token_ids"] for b in bodies] == [prompt, prompt + [7, 8, eos] + obs]
    for b in bodies:
        params = b["sampling_params"]
        assert (params["stop"], params["include_stop_str_in_output"], params["detokenize"]) == (
            ["}"], True, True)
    assert list(r.token_ids) == [7, 8, eos] + obs + [7, 8, eos]
    assert r.meta["ended"] == "max_turns" and env.closed == 1


def test_the_python_tool_runs_in_the_sandbox_through_an_episode(tokenizer):
    """arith_tool's real environment, the `plain` format and a sandboxed session (this machine's
    best backend): the scripted model writes a ```python block then ```output (the stop string),
    the session runs it, the output is appended as tokens, the model boxes the answer."""
    from scalerl.envs.catalog import get_task as task_named
    from scalerl.envs.grading import Grading
    from scalerl.envs.tool_format import tool_format

    task = task_named("arith_tool")
    sample = task.samples("test")[0]
    a, b = (int(x) for x in sample.prompt.rstrip("=").split("*"))
    turns = iter([(f"```python\nprint({a} * {b})\n```\n```output", True),
                  (f"\n\\boxed{{{a * b}}}<|endoftext|>", True)])

    def reply(n):
        text, ended = next(turns)
        return tokenizer.encode(text, add_special_tokens=False), ended

    backend = Scripted(tokenizer, 1024, reply)
    backend.scorer = Scorer([task])
    grading = Grading()
    from scalerl.sandbox.session import LazySessions

    sessions = LazySessions(grading.sandbox)
    context = EnvContext(sessions=sessions, tool_format=tool_format("plain"), grading=grading)
    try:
        with ThreadPoolExecutor(4) as pool:
            episode = E.Episode(backend, sample, 0, [5] * 20, Budget(thinking=None, answer=64),
                                Sampling(1.0), 0, task.environment, context, pool)
            r = asyncio.run(E.run_episode(episode, score=True))
    finally:
        sessions.close()
    [call] = r.tool_calls
    assert (call["status"], call["output"].strip(), call["turn"]) == ("ok", str(a * b), 0)
    obs = r.turns[1]
    assert obs.role == "tool" and obs.text == f"\n{a * b}\n```\n"
    assert list(r.token_ids[obs.start:obs.end]) == tokenizer.encode(obs.text,
                                                                    add_special_tokens=False)
    assert r.meta["ended"] == "done" and r.score.status == "correct"
    print(f"\ntool call latency {call['latency_s']:.3f} s")
