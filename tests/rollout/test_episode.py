"""Multi-turn episodes through real vLLM on the tiny model (slow: shares the session engine).

The environment and tool format are the test's own (a fixed observation after every turn, done
after k turns; the tiny model's chat template is `Q:..\\nA:..<|endoftext|>`), so every expected
token is worked out here from the tokenizer, independently of rollout/episode.py. The task is a
copy of `arith` under another name, added to the session scorer for the test only. The last
test plays the same episodes on the session's two real vLLM servers (it runs with the other
server tests, last).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import pytest
import torch
from tiny_rollouts import checkpoint

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_task
from scalerl.envs.environment import (
    EnvContext,
    Environment,
    Reply,
    SessionFailed,
    ToolCall,
    ToolOutcome,
)
from scalerl.envs.task import Task
from scalerl.rollout.types import INTERRUPTION_PHRASE, Budget

pytestmark = pytest.mark.slow
TASK = "arith_episode_test"


class LineFormat:
    """The test's tool format: after a turn, `\\nT:<observation>\\nA:` (then the next turn)."""

    name, tool_names = "line", None

    def __init__(self, stop: tuple[str, ...] = ()) -> None:
        self.stop = stop

    def template_tools(self, schemas):
        return None

    def delta_text(self, tokenizer, messages, last_turn_text, template_kwargs=None,
                   tools=()) -> str:
        return "".join(f"\nT:{m['content']}" for m in messages) + "\nA:"


class FixedEnv(Environment):
    """Answers every turn with `obs` (one `python` call whose status cycles ok/error) and is done
    after `done_after` turns (None: never). `sleep`: seconds per step for the sample ids in
    `slow`; `fail_at`: the step that raises SessionFailed; `on_step(n)`: a hook."""

    name = "fixed_env"

    def __init__(self, *, done_after: int | None = 3, max_turns: int = 4, obs: str = "ok",
                 slow: dict[str, float] | None = None, fail_at: int | None = None,
                 on_step=None) -> None:
        self.done_after, self.max_turns, self.obs = done_after, max_turns, obs
        self.slow, self.fail_at, self.on_step = slow or {}, fail_at, on_step
        self.started: list[str] = []
        self.closed: list[str] = []
        self.transcripts: dict[str, list] = {}
        self._lock = threading.Lock()

    def start(self, sample, context):
        with self._lock:
            key = f"{sample.id}#{len(self.started)}"
            self.started.append(key)
        return {"key": key, "n": 0}

    def step(self, sample, transcript, state) -> Reply:
        state["n"] += 1
        self.transcripts[state["key"]] = list(transcript)
        if self.on_step is not None:
            self.on_step(state["n"])
        if state["n"] == self.fail_at:
            raise SessionFailed("the sandbox died (test)")
        time.sleep(self.slow.get(sample.id, 0.0))
        if self.done_after is not None and state["n"] >= self.done_after:
            return Reply(done=True)
        status = "ok" if state["n"] % 2 else "error"
        return Reply(done=False, messages=({"role": "tool", "content": self.obs},),
                     calls=(ToolCall("python", {"code": f"print({state['n']})"}),),
                     outcomes=(ToolOutcome(status, self.obs, 0.01 * state["n"]),))

    def close(self, state) -> None:
        with self._lock:
            self.closed.append(state["key"])


class EnvArith(Task):
    name = TASK

    def __init__(self, env: Environment) -> None:
        base = get_task("arith")
        self.kind, self.system_prompt, self.options = base.kind, base.system_prompt, base.options
        self.environment = env

    def build(self, split: str):
        return [dataclasses.replace(s, task=TASK) for s in get_task("arith").samples(split)]


@pytest.fixture
def play(engine, monkeypatch):
    """`play(env, fmt=LineFormat())`: the engine, with the test task (its environment `env`)
    in its scorer and the test's tool format, until the test ends."""
    def setup(env: Environment, fmt=None) -> list[Sample]:
        task = EnvArith(env)
        monkeypatch.setitem(engine.scorer.tasks, TASK, task)
        engine.env_context()  # the pool of environment threads
        monkeypatch.setattr(engine, "_env_context", EnvContext(tool_format=fmt or LineFormat()))
        return list(task.samples("test"))
    return setup


def wait_closed(env: FixedEnv, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sorted(env.closed) != sorted(env.started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(env.closed) == sorted(env.started)


def test_turns_are_token_exact_masked_and_agree_with_the_trainer(engine, play,
                                                                 tiny_model_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from scalerl.trainer.batch import collate

    env = FixedEnv(done_after=3, max_turns=4, obs="out 42")
    samples = play(env)[:6]
    requests: list[list[int]] = []
    sample_fn = engine._sample

    async def spy(prompt, *args, **kwargs):
        requests.append(list(prompt))
        return await sample_fn(prompt, *args, **kwargs)

    monkeypatch.setattr(engine, "_sample", spy)
    tok = engine.tokenizer
    obs_ids = tok.encode("\nT:out 42\nA:", add_special_tokens=False)
    phrase = tok.encode(INTERRUPTION_PHRASE, add_special_tokens=False)
    rollouts = engine.generate(samples, n=2, budget=Budget(thinking=48, answer=24, total=600),
                               temperature=1.0, seed=3)
    assert len(rollouts) == 12
    done = [r for r in rollouts if r.meta["ended"] == "done"]
    assert len(done) >= 9  # the tiny model ends nearly every turn within its budget
    for r in rollouts:
        prompt, tokens = list(r.prompt_token_ids), list(r.token_ids)
        assert prompt == tok.encode(tok.apply_chat_template(
            samples[r.meta["index"]].messages(get_task("arith").system_prompt), tokenize=False,
            add_generation_prompt=True), add_special_tokens=False)
        assert len(tokens) == len(r.logprobs) == len(r.versions)
        roles = [t.role for t in r.turns]
        assert roles == ["assistant", "tool"] * (len(roles) // 2) + ["assistant"]
        assert r.turns[0].start == 0 and r.turns[-1].end == len(tokens)
        assert all(a.end == b.start for a, b in zip(r.turns, r.turns[1:], strict=False))
        for t in r.turns:
            ids, lps = tokens[t.start:t.end], r.logprobs[t.start:t.end]
            if t.role == "tool":  # the environment's tokens: the delta, encoded alone, no logprob
                assert ids == obs_ids and t.text == "\nT:out 42\nA:" and not t.trained
                assert all(lp is None for lp in lps)
            else:  # sampled, but for a forced interruption phrase
                forced = [i for i, lp in enumerate(lps) if lp is None]
                assert not forced or [ids[i] for i in forced] == phrase
                assert t.trained and t.text == tok.decode(ids, skip_special_tokens=False)
                if t.end < len(tokens):  # answered: the turn ended at EOS
                    assert ids[-1] == tok.eos_token_id
        # decoding prompt + tokens gives the conversation the turns say, nothing re-tokenized
        assert tok.decode(prompt + tokens, skip_special_tokens=False) == (
            tok.decode(prompt, skip_special_tokens=False) + "".join(t.text for t in r.turns))
        assert r.completion == tok.decode(tokens, skip_special_tokens=True)
        assert set(r.versions) == {engine.version}
        assert r.meta["turns"] == roles.count("assistant")
        assert r.meta["observation_tokens"] == len(obs_ids) * roles.count("tool")
        assert r.meta["sampled_tokens"] == sum(lp is not None for lp in r.logprobs)
        assert r.score.status in ("correct", "wrong", "no_answer")
        if r.meta["ended"] == "done":
            assert r.meta["turns"] == 3 and r.finish_reason in ("stop", "interrupted")
            assert [(c["turn"], c["status"], c["name"], c["arguments"]) for c in r.tool_calls] \
                == [(0, "ok", "python", {"code": "print(1)"}),
                    (2, "error", "python", {"code": "print(2)"})]
        # every request was token-in: the prompt, then prompt + every token before the request
        starts = [t.start for t in r.turns if t.role == "assistant"]
        for s in starts:
            assert prompt + tokens[:s] in requests
    # the environment saw the assistant turns' text (special tokens dropped) and its own replies
    r = done[0]
    seen = next(v for k, v in env.transcripts.items() if k.startswith(r.sample_id))
    assert [m["role"] for m in seen] == ["system", "user", "assistant", "tool", "assistant",
                                         "tool", "assistant"]
    wait_closed(env)
    assert len(env.started) == 12

    # the trainer's mask: exactly the sampled tokens; its logprobs agree with the engine's
    for r in rollouts:
        batch = collate([[dataclasses.replace(r, reward=1.0)]], normalise="none",
                        aggregation="token", pad_id=0)
        trained = [float(t.trained) for t in r.turns for _ in range(t.start, t.end)]
        forced = [float(lp is not None) for lp in r.logprobs]
        assert batch.mask[0].tolist() == [a * b for a, b in zip(trained, forced, strict=True)]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    k3 = []
    for r in rollouts:
        ids = torch.tensor([list(r.prompt_token_ids) + list(r.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(r.prompt_token_ids) - 1:-1].float()
        hf = torch.log_softmax(logits, -1).gather(1, torch.tensor(r.token_ids)[:, None])[:, 0]
        for lp, h in zip(r.logprobs, hf.tolist(), strict=True):
            if lp is not None:
                k3.append(math.exp(h - lp) - 1 - (h - lp))
    print(f"\nmulti-turn mismatch KL(gen||hf) k3={sum(k3) / len(k3):.3e} over {len(k3)} tokens")
    assert sum(k3) / len(k3) <= 1e-3


def test_stop_strings_end_a_turn_and_stay_in_its_tokens(engine, play):
    env = FixedEnv(done_after=2, max_turns=2)
    samples = play(env, LineFormat(stop=("}",)))[:4]
    rollouts = engine.generate(samples, n=2, budget=Budget(thinking=48, answer=24, total=400),
                               temperature=1.0, seed=4, score=False)
    tok = engine.tokenizer
    first = [r.turns[0] for r in rollouts if r.meta["ended"] == "done"]
    assert len(first) >= 6
    for t in first:  # the first turn stopped at `}` (kept), before its EOS
        assert t.text.endswith("}") and tok.eos_token not in t.text
    wait_closed(env)


def test_max_turns_and_the_total_budget_truncate(engine, play):
    env = FixedEnv(done_after=None, max_turns=2, obs="out 42")
    samples = play(env)[:3]
    rollouts = engine.generate(samples, n=2, budget=Budget(thinking=48, answer=24, total=2000),
                               temperature=1.0, seed=5, score=False)
    ended = [r for r in rollouts if r.meta["ended"] == "max_turns"]
    assert len(ended) >= 4  # the others: a turn ran out of its own budget first
    for r in ended:
        assert r.finish_reason == "truncated"
        assert r.meta["turns"] == 2 and len(r.tool_calls) == 2  # both calls ran
        assert [t.role for t in r.turns] == ["assistant", "tool", "assistant"]
    wait_closed(env)

    # The total counts observation tokens: one turn may take all of it (answer 200 > total),
    # so the total, not a turn's own budget, is what ends every episode here.
    env = FixedEnv(done_after=None, max_turns=50, obs="out 42")
    samples = play(env)[:3]
    total = 100
    rollouts = engine.generate(samples, n=2, budget=Budget(thinking=None, answer=200,
                                                           total=total),
                               temperature=1.0, seed=6, score=False)
    obs_len = len(engine.tokenizer.encode("\nT:out 42\nA:", add_special_tokens=False))
    for r in rollouts:
        assert r.meta["ended"] == "budget" and r.finish_reason == "truncated"
        assert len(r.token_ids) <= total
        assert r.meta["observation_tokens"] == obs_len * (r.meta["turns"] - 1) > 0
        # no room was left for another observation and turn
        assert len(r.token_ids) + obs_len >= total
    wait_closed(env)


def test_an_episode_outgrowing_max_model_len_ends_cleanly(engine, play):
    # each observation ~600 tokens, and a turn may take 400 (the total is no limit): the second
    # or third turn, or an observation, would pass max_model_len (1024 here)
    env = FixedEnv(done_after=None, max_turns=50, obs="z" * 600)
    samples = play(env)[:2]
    rollouts = engine.generate(samples, n=2, budget=Budget(thinking=None, answer=400,
                                                           total=100000),
                               temperature=1.0, seed=7)
    for r in rollouts:
        assert r.meta["ended"] == "max_model_len" and r.finish_reason == "truncated"
        assert len(r.prompt_token_ids) + len(r.token_ids) <= engine.max_model_len
        assert r.meta["turns"] >= 1 and r.score.status in ("correct", "wrong", "no_answer")
    assert any(r.meta["turns"] >= 2 for r in rollouts)
    wait_closed(env)


def test_a_failed_session_is_an_error_verdict_and_the_environment_is_closed(engine, play):
    env = FixedEnv(done_after=5, max_turns=5, fail_at=2)
    samples = play(env)[:3]
    rollouts = engine.generate(samples, n=1, budget=Budget(thinking=48, answer=24, total=400),
                               temperature=1.0, seed=8)
    for r in rollouts:
        if r.meta["ended"] == "turn_budget":
            continue
        assert r.meta["ended"] == "session_failed"
        assert r.score.status == "error" and "the sandbox died (test)" in r.score.detail
        assert r.meta["turns"] == 2  # the second turn's step failed
    assert any(r.meta["ended"] == "session_failed" for r in rollouts)
    wait_closed(env)
    assert len(env.closed) == 3


def test_a_slow_environment_delays_only_its_own_rollout(engine, play):
    env = FixedEnv(done_after=2, max_turns=2)
    samples = play(env)[:6]
    env.slow = {samples[0].id: 3.0}  # each of its two steps
    t0 = time.perf_counter()
    rollouts = engine.generate(samples, n=1, budget=Budget(thinking=32, answer=16, total=200),
                               temperature=1.0, seed=9, score=False)
    finished = {r.sample_id: r.timings["gen_end"] - t0 for r in rollouts}
    slow = finished.pop(samples[0].id)
    print(f"\nslow rollout {slow:.2f} s; the others {min(finished.values()):.2f}-"
          f"{max(finished.values()):.2f} s")
    assert slow >= 6.0
    assert max(finished.values()) < 3.0  # done while its first slow step still slept
    wait_closed(env)


def test_a_cancelled_stream_closes_every_environment(engine, play):
    env = FixedEnv(done_after=2, max_turns=2)
    samples = play(env)[:4]
    env.slow = {s.id: 3.0 for s in samples[1:]}
    stream = engine.stream(samples, n=1, budget=Budget(thinking=32, answer=16, total=200),
                           temperature=1.0, seed=10, score=False)
    first = next(stream)
    stream.close()  # cancels the rollouts still waiting on their environment
    assert first.sample_id == samples[0].id
    wait_closed(env, timeout_s=15)
    assert len(env.started) == 4


def test_turns_straddle_an_in_flight_update(engine, play, tiny_model_path):
    base = checkpoint(tiny_model_path)
    v0 = engine.version

    def update(n: int) -> None:
        if n == 1:  # between the first and the second turn, from the environment's thread
            engine.update_weights(base.items(), v0 + 1)

    env = FixedEnv(done_after=2, max_turns=2, on_step=update)
    samples = play(env)[:1]
    [r] = engine.generate(samples, n=1, budget=Budget(thinking=48, answer=24, total=300),
                          temperature=1.0, seed=11, score=False)
    assert engine.version == v0 + 1
    a, obs, b = r.turns
    assert set(r.versions[a.start:a.end]) == {v0}
    assert set(r.versions[obs.start:obs.end]) == {v0 + 1}  # appended after the update
    assert set(r.versions[b.start:b.end]) == {v0 + 1}
    wait_closed(env)


def test_servers_play_the_same_episodes_as_the_engine(vllm_servers, engine, play,
                                                      tiny_model_path):
    """On real vLLM servers (token-in, stop strings on the server's side) the same seeds give
    the same episodes, token for token, as in-process."""
    from scalerl.rollout.engine_config import EngineConfig
    from scalerl.rollout.scorer import Scorer
    from scalerl.rollout.server_generator import ServerGenerator

    fmt = LineFormat(stop=("}",))
    env = FixedEnv(done_after=3, max_turns=3, obs="out 42")
    samples = play(env, fmt)[:4]
    budget = Budget(thinking=32, answer=24, total=400)
    local = engine.generate(samples, n=2, budget=budget, temperature=1.0, seed=12, score=False)
    config = EngineConfig(max_model_len=1024, servers=tuple(vllm_servers.urls),
                          server_timeout_s=5.0, server_wait_s=60.0)
    gen = ServerGenerator(tiny_model_path, config=config,
                          scorer=Scorer({TASK: engine.scorer.tasks[TASK]}))
    try:
        gen._env_context = EnvContext(tool_format=fmt)
        remote = gen.generate(samples, n=2, budget=budget, temperature=1.0, seed=12,
                              score=False)
    finally:
        gen.close()
    assert [r.token_ids for r in remote] == [r.token_ids for r in local]
    assert [[t.to_dict() for t in r.turns] for r in remote] == [
        [t.to_dict() for t in r.turns] for r in local]
    assert sum(r.meta["turns"] for r in remote) >= 16  # several turns, most of them stopped at }
    wait_closed(env)
