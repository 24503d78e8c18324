"""The PipelineRL rollout source against the loop's calls: with max_lag 0 it serves exactly what
PPO-offpolicy-1 serves (same prompts, seeds, versions), the lag bound holds as the loop drives it,
and its state survives torch.save (the checkpoint path) with the trainer's own sampler.

`SeededGenerator` is a stand-in for lag/ordering logic only: each token is a hash of (seed,
sample, group, position) and carries the version loaded when it was "sampled".
"""

from __future__ import annotations

import hashlib
import io
import time

import pytest
import torch

from scalerl.envs.base import Sample, Score
from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.rollout.types import Budget, Rollout
from scalerl.trainer.pipeline_source import PipelineSource
from scalerl.trainer.sampler import TaskSampler
from scalerl.trainer.sources import PPOOffPolicy, SourceSettings


class SeededGenerator:
    def __init__(self, tokens: int = 3, token_s: float = 0.001):
        self.version, self.tokens, self.token_s = 0, tokens, token_s
        self.model_path = "/nonexistent"
        self.updates: list[int] = []
        self.made = 0  # tokens generated so far

    def update_weights(self, named_tensors, version, *, timeout_s=60.0):
        list(named_tensors)
        self.updates.append(version)
        self.version = version

    def metrics(self):
        return {}

    def generate(self, samples, *, n, budget, temperature, seed, priority=0):
        out = []
        for s in samples:
            for g in range(n):
                toks, vers = [], []
                for i in range(self.tokens):
                    time.sleep(self.token_s)
                    h = hashlib.blake2b(f"{seed}|{s.id}|{g}|{i}".encode(), digest_size=2)
                    toks.append(int.from_bytes(h.digest(), "little") % 100)
                    vers.append(self.version)
                    self.made += 1
                out.append(Rollout(sample_id=s.id, task=s.task, prompt_token_ids=(1,),
                                   token_ids=tuple(toks), logprobs=(-1.0,) * self.tokens,
                                   versions=tuple(vers), finish_reason="stop",
                                   thinking_tokens=0, answer_tokens=self.tokens,
                                   completion="", score=Score(status="wrong"),
                                   group=g))
        return out


def settings(**kw) -> SourceSettings:
    base = dict(budgets={"arith": Budget(answer=8), "code": Budget(answer=4)},
                prompts_per_step=3, rollouts_per_prompt=2, temperature=1.0, seed=5, k=1,
                max_lag=2)
    return SourceSettings(**(base | kw))


def sampler() -> TaskSampler:
    rows = {t: [Sample(id=f"{t}{i}", task=t, prompt=f"{t} {i}") for i in range(7)]
            for t in ("arith", "code")}
    return TaskSampler(rows, {"arith": 2.0, "code": 1.0}, seed=3)


WEIGHTS = lambda: [("w", torch.zeros(2))]  # noqa: E731


def drive(source, steps: int, start: int = 0, step_s: float = 0.0) -> list[list]:
    """What `trainer/loop.py` does per step, minus the maths."""
    served = []
    for step in range(start, start + steps):
        groups, _ = source.next_groups(step)
        served.append(groups)
        time.sleep(step_s)
        source.on_step(step + 1, WEIGHTS)
    return served


def key(groups) -> list:
    return [[(r.sample_id, r.group, r.token_ids, r.versions) for r in g] for g in groups]


def test_max_lag_zero_serves_what_ppo_offpolicy_1_serves():
    ppo_gen, pipe_gen = SeededGenerator(), SeededGenerator()
    ppo = drive(PPOOffPolicy(ppo_gen, sampler(), settings()), steps=4)
    source = PipelineSource(pipe_gen, sampler(), settings(max_lag=0))
    try:
        pipe = drive(source, steps=4)
    finally:
        source.close()
    assert [key(g) for g in pipe] == [key(g) for g in ppo]
    assert pipe_gen.updates == [1, 2, 3, 4]


def test_lag_bound_holds_as_the_loop_drives_the_source():
    gen = SeededGenerator()
    source = PipelineSource(gen, sampler(), settings(max_lag=2))
    try:
        lags = []
        for step in range(8):
            groups, metrics = source.next_groups(step)
            lags.append(metrics["async/lag_max"])
            assert all(step - min(r.versions) <= 2 for g in groups for r in g)
            time.sleep(0.1)  # a slow trainer: the generator runs ahead to the bound
            source.on_step(step + 1, WEIGHTS)
        idle = source.idle()
    finally:
        source.close()
    assert max(lags) == 2.0
    assert idle["pipeline_wall_s"] > idle["generator_idle_s"] > 0


def test_state_survives_torch_save_without_repeating_or_skipping():
    gen = SeededGenerator(token_s=0.004)
    first = PipelineSource(gen, sampler(), settings(max_lag=2))
    try:
        before = drive(first, steps=3, step_s=0.01)
        buf = io.BytesIO()
        torch.save(first.state_dict(), buf)
    finally:
        first.close()
    buf.seek(0)
    state = torch.load(buf, weights_only=False)

    gen2 = SeededGenerator()
    second = PipelineSource(gen2, sampler(), settings(max_lag=2))
    second.load_state_dict(state)
    second.on_step(3, WEIGHTS)  # what the loop's restore() does: tag the restored version
    try:
        after = drive(second, steps=3, start=3)
    finally:
        second.close()
    uninterrupted_gen = SeededGenerator()
    ref = PipelineSource(uninterrupted_gen, sampler(), settings(max_lag=0))
    try:
        expected = drive(ref, steps=6)
    finally:
        ref.close()
    ids = [[r.sample_id for g in step for r in g[:1]] for step in before + after]
    assert ids == [[r.sample_id for g in step for r in g[:1]] for step in expected]


def test_resuming_from_another_mode_is_refused():
    source = PipelineSource(SeededGenerator(), sampler(), settings(max_lag=1))
    with pytest.raises(ValueError, match="not PipelineRL's"):
        source.load_state_dict({"round": 3, "pending": [], "sampler": None})


def test_generation_tokens_per_s_never_exceeds_what_the_generator_made():
    """Served tokens over generator busy time, over the run: a per-batch busy delta can be ~0 when
    the batch was already buffered (it read 1.7e8 tokens/s in a real run)."""
    gen = SeededGenerator()
    source = PipelineSource(gen, sampler(), settings(max_lag=2))
    try:
        served, seen = 0, []
        for step in range(5):
            groups, metrics = source.next_groups(step)
            busy = metrics["async/wall_s"] - metrics["async/generator_idle_s"]
            served += sum(len(r.token_ids) for g in groups for r in g)
            assert metrics["rollout/tokens_per_s"] == pytest.approx(served / busy)
            assert metrics["rollout/tokens_per_s"] <= gen.made / busy  # made >= served
            seen.append(metrics["rollout/tokens_per_s"])
            if step == 0:  # a slow first step: the generator fills the buffer up to the lag bound
                time.sleep(0.3)
            source.on_step(step + 1, WEIGHTS)  # then quick steps served from the buffer
    finally:
        source.close()
    assert all(v > 0 for v in seen)


def too_long_group(task: str, n: int = 2) -> list[Rollout]:
    return [Rollout(sample_id="x", task=task, prompt_token_ids=(1,) * 9, token_ids=(),
                    logprobs=(), versions=(), finish_reason="prompt_too_long", thinking_tokens=0,
                    answer_tokens=0, completion="", score=Score("error", -1.0, "too long"),
                    group=g) for g in range(n)]


def test_prompts_too_long_are_skipped_and_counted_per_task():
    from scalerl.trainer.sources import skip_too_long

    ok = [Rollout(sample_id="y", task="arith", prompt_token_ids=(1,), token_ids=(2,),
                  logprobs=(-1.0,), versions=(0,), finish_reason="stop", thinking_tokens=0,
                  answer_tokens=1, completion="", score=Score("wrong", -1.0), group=0)]
    kept, metrics = skip_too_long([too_long_group("code"), ok, too_long_group("code"),
                                   too_long_group("arith")])
    assert kept == [ok]
    assert metrics == {"rollout/prompt_too_long": 3.0, "rollout/prompt_too_long/code": 2.0,
                       "rollout/prompt_too_long/arith": 1.0}
    assert skip_too_long([ok]) == ([ok], {"rollout/prompt_too_long": 0.0})


def test_the_loop_warns_once_per_task_with_prompts_too_long():
    from types import SimpleNamespace

    from scalerl.trainer.loop import warn_too_long

    printed = []
    run = SimpleNamespace(step=3, warned_too_long=set(),
                          writer=SimpleNamespace(print=printed.append))
    with pytest.warns(UserWarning, match="task code has prompts too long"):
        warn_too_long(run, {"rollout/prompt_too_long/code": 2.0, "rollout/prompt_too_long": 2.0})
    warn_too_long(run, {"rollout/prompt_too_long/code": 1.0})  # already warned: silent
    assert len(printed) == 1 and "engine.max_model_len" in printed[0]


class UnavailableOnce(SeededGenerator):
    """Generation unavailable on the first call (no server left), then back."""

    def __init__(self):
        super().__init__()
        self.failed = False

    def generate(self, samples, **kw):
        if not self.failed:
            self.failed = True
            raise GeneratorUnavailable("no vLLM server usable for 5 s")
        return super().generate(samples, **kw)


def assert_resumes_as(resumed, state: dict, reference) -> None:
    """`resumed`, loaded with `state`, gives the next two steps' groups `reference` gives (both
    closed after)."""
    resumed.load_state_dict(state)
    try:
        assert [key(g) for g in drive(resumed, steps=2)] == [key(g) for g in drive(reference,
                                                                                  steps=2)]
    finally:
        resumed.close()
        reference.close()


@pytest.mark.parametrize("kind", [PPOOffPolicy, PipelineSource])
def test_unavailable_generation_surfaces_as_itself_and_loses_no_prompt(kind):
    """The loop checkpoints on GeneratorUnavailable: the source's state then must hold every
    prompt drawn, so the resumed run trains what an uninterrupted one would."""
    failing, fine = UnavailableOnce(), SeededGenerator()
    source = kind(failing, sampler(), settings(max_lag=0))
    reference = kind(fine, sampler(), settings(max_lag=0))
    try:
        with pytest.raises(GeneratorUnavailable, match="no vLLM server usable"):
            source.next_groups(0)
        state = source.state_dict()
    finally:
        source.close()
    assert_resumes_as(kind(SeededGenerator(), sampler(), settings(max_lag=0)), state, reference)


def test_the_wait_and_in_flight_settings_reach_the_pipeline_and_bad_ones_fail_in_one_line():
    from types import SimpleNamespace

    from scalerl.coerce import ConfigError
    from scalerl.config import load_config
    from scalerl.trainer.loop import source_settings

    cfg = load_config("tiny-cpu", ["offpolicy.batch_wait_s=90", "offpolicy.stall_s=null",
                                   "offpolicy.max_in_flight=600", "offpolicy.prompts_per_step=32",
                                   "offpolicy.rollouts_per_prompt=8", "offpolicy.max_lag=8"])
    tasks = {"arith": SimpleNamespace(budget=Budget(answer=8))}
    source = PipelineSource(SeededGenerator(), sampler(), source_settings(cfg, tasks))
    try:
        pipe = source.pipeline
        assert (pipe.batch_wait_s, pipe.stall_s) == (90.0, None)
        assert pipe.max_in_flight == 75  # 600 rollouts / 8 per prompt
    finally:
        source.close()
    assert load_config("tiny-cpu").offpolicy.stall_s == 1800.0  # the default: 30 min
    for bad, says in [("batch_wait_s=0", "must be > 0 or null"),
                      ("stall_s=-5", "must be > 0 or null"),
                      ("max_in_flight=255", "must be >= one batch.* = 256")]:
        with pytest.raises(ConfigError, match=f"^offpolicy.{bad.split('=')[0]} = .*{says}"):
            load_config("tiny-cpu", [f"offpolicy.{bad}"])


def test_an_expired_wait_stops_the_loop_as_unavailable_generation():
    class Hung(SeededGenerator):
        def generate(self, samples, **kw):
            time.sleep(30)

    source = PipelineSource(Hung(), sampler(), settings(max_lag=0, batch_wait_s=0.3))
    try:
        with pytest.raises(GeneratorUnavailable, match="batch_wait_s, is 0.3 s"):
            source.next_groups(0)
    finally:
        source.pipeline.stop(drain_s=0)
        source.publisher.close()


def test_a_stop_ends_the_wait_for_a_batch_with_no_batch_taken():
    """A stop asked (the loop's StopRequest, read once a second) ends PipelineRL's wait with
    StepAbandoned; the state then still holds the batch, so a resumed run trains it."""
    from scalerl.trainer.stopping import StepAbandoned

    slow = SeededGenerator(token_s=0.5)  # 3 prompts x 2 rollouts x 3 tokens: ~9 s a batch
    source = PipelineSource(slow, sampler(), settings(max_lag=0))
    reference = PipelineSource(SeededGenerator(), sampler(), settings(max_lag=0))
    source.stop = lambda: "SIGTERM"
    try:
        t = time.monotonic()
        with pytest.raises(StepAbandoned, match="the wait for the next batch"):
            source.next_groups(0)
        assert time.monotonic() - t < 3.0
        state = source.state_dict()
    finally:
        source.pipeline.stop(drain_s=0)
        source.publisher.close()
    assert state["buffer"]["batches_taken"] == 0
    assert_resumes_as(PipelineSource(SeededGenerator(), sampler(), settings(max_lag=0)), state,
                      reference)


def test_ppo_state_taken_at_a_step_start_is_a_copy_the_step_does_not_change():
    """trainer/loop.py copies the source's state at each step's start, for a stop before that
    step's update: with k=2 the second minibatch is pending then, and taking it must not empty
    the copy (a live list would: the resumed run would skip that minibatch)."""
    source = PPOOffPolicy(SeededGenerator(), sampler(), settings(k=2))
    drive(source, steps=1)
    state = source.state_dict()
    assert len(state["pending"]) == 1
    served, _ = source.next_groups(1)
    resumed = PPOOffPolicy(SeededGenerator(), sampler(), settings(k=2))
    resumed.load_state_dict(state)
    assert key(resumed.next_groups(1)[0]) == key(served)


def test_a_pipeline_snapshot_serialised_after_the_next_batch_is_taken_still_holds_it():
    """The loop snapshots the source at each step's start and serialises it only if a stop
    drops that step: the batch taken meanwhile must be in it, so the resumed run trains it."""
    source = PipelineSource(SeededGenerator(), sampler(), settings(max_lag=0))
    try:
        drive(source, steps=1)
        snapshot = source.snapshot()
        served, _ = source.next_groups(1)
        state = snapshot()
    finally:
        source.close()
    assert state["buffer"]["batches_taken"] == 1
    resumed = PipelineSource(SeededGenerator(), sampler(), settings(max_lag=0))
    resumed.load_state_dict(state)
    try:
        resumed.on_step(1, WEIGHTS)  # what a resume does first (loop.restore: hand_weights)
        assert key(resumed.next_groups(1)[0]) == key(served)
    finally:
        resumed.close()
