"""PipelineRL driver: the lag bound under a slow trainer and a slow verifier, max_lag 0 is
synchronous, failures surface, and a mid-run checkpoint resumes without repeating or skipping.

`FakeGenerator` stands in for the vLLM engine only in these lag/timing tests: it stamps each
token with the version loaded when the token is "sampled" (a sleep), which is all the pipeline
reads. The real-engine test at the bottom is marked slow and uses the session `engine`.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from tiny_rollouts import checkpoint

from scalerl.envs.base import Sample, Score
from scalerl.rollout import pipeline
from scalerl.rollout.base_generator import GeneratorUnavailable, phase_priority
from scalerl.rollout.buffer import BufferClosed
from scalerl.rollout.pipeline import PipelineRL, in_flight_prompts
from scalerl.rollout.types import Budget, Rollout


class FakeGenerator:
    """Token-by-token timing of a generator, without a model (lag/timing tests only)."""

    def __init__(self, tokens: int = 4, token_s: float = 0.002, score_s=lambda sample: 0.0,
                 fail_on: str | None = None):
        self.tokens, self.token_s, self.score_s, self.fail_on = tokens, token_s, score_s, fail_on
        self._version = 0
        self.calls: list[tuple[str, int | None]] = []
        self.priorities: list[tuple[str, int]] = []

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, version: int) -> None:
        self._version = version

    def generate(self, samples: list[Sample], *, n: int, budget: Budget, temperature: float,
                 seed: int | None, priority: int = 0, scorer: Any = None) -> list[Rollout]:
        (sample,) = samples
        self.calls.append((sample.id, seed))
        self.priorities.append((sample.id, priority))
        if sample.id == self.fail_on:
            raise RuntimeError(f"engine crashed on {sample.id}")
        versions = []
        for _ in range(self.tokens):
            time.sleep(self.token_s)
            versions.append(self._version)
        time.sleep(self.score_s(sample))  # the verifier runs after the last token
        return [Rollout(sample_id=sample.id, task=sample.task, prompt_token_ids=(1,),
                        token_ids=(7,) * self.tokens, logprobs=(-1.0,) * self.tokens,
                        versions=tuple(versions), finish_reason="stop", thinking_tokens=0,
                        answer_tokens=self.tokens, completion="7",
                        score=Score(status="wrong"), group=i) for i in range(n)]


class CountingSampler:
    def __init__(self, limit: int | None = None):
        self.pos, self.limit = 0, limit

    def __call__(self) -> Sample:
        if self.limit is not None and self.pos >= self.limit:
            raise StopIteration
        self.pos += 1
        return Sample(id=f"p{self.pos - 1}", task="arith", prompt=f"Q{self.pos - 1}")

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.pos = state["pos"]


def make_pipeline(gen, sampler, *, max_lag: int, groups_per_batch: int = 2, n: int = 2,
                  **kw) -> PipelineRL:
    return PipelineRL(gen, sampler, n=n, groups_per_batch=groups_per_batch, max_lag=max_lag,
                      budget=Budget(answer=8), temperature=1.0, seed=100, **kw)


def train(pipe: PipelineRL, gen: FakeGenerator, steps: int, step_s: float = 0.0,
          start_version: int = 0) -> list:
    """A trainer stand-in: take a batch at version v, 'step' for step_s, publish v + 1."""
    batches = []
    for v in range(start_version, start_version + steps):
        batch = pipe.take_batch(trainer_version=v, timeout_s=20.0)
        batches.append(batch)
        time.sleep(step_s)
        gen.update_weights(v + 1)
    return batches


@pytest.mark.parametrize("max_lag", [1, 3])
def test_lag_bound_holds_and_is_reached_under_a_slow_trainer(max_lag):
    gen = FakeGenerator(tokens=3, token_s=0.001)
    with make_pipeline(gen, CountingSampler(), max_lag=max_lag) as pipe:
        batches = train(pipe, gen, steps=10, step_s=0.15)  # slow: ahead even under load
        metrics = pipe.metrics(batches[-1])
    lags = [lag for b in batches for lag in b.lags]
    assert max(lags) == max_lag  # the generator runs ahead as far as allowed, and no further
    assert min(lags) >= 0
    assert all(b.regenerated == 0 for b in batches)  # pacing, not discarding
    assert metrics["async/lag_max"] == max_lag
    assert metrics["async/generator_idle_frac"] > 0.3  # it waits on the slow trainer


def test_lag_bound_holds_under_a_slow_verifier():
    rng = random.Random(0)
    slow = {f"p{i}" for i in range(60) if rng.random() < 0.3}
    gen = FakeGenerator(tokens=4, token_s=0.001,
                        score_s=lambda s: 0.12 if s.id in slow else 0.0)
    with make_pipeline(gen, CountingSampler(), max_lag=2, groups_per_batch=3) as pipe:
        batches = train(pipe, gen, steps=12)
    assert max(lag for b in batches for lag in b.lags) <= 2
    ids = [g.sample.id for b in batches for g in b.groups]
    assert ids == [f"p{i}" for i in range(36)]  # in order despite out-of-order completion
    assert sum(b.wait_s for b in batches) > 0.1  # the trainer waited on the slow verifier


def test_max_lag_zero_is_synchronous_ppo_offpolicy_1():
    gen = FakeGenerator(tokens=5, token_s=0.001)
    with make_pipeline(gen, CountingSampler(), max_lag=0) as pipe:
        batches = train(pipe, gen, steps=5, step_s=0.02)
        m = pipe.metrics(batches[-1])
    for step, b in enumerate(batches):
        assert {v for g in b.groups for r in g.rollouts for v in r.versions} == {step}
    assert (m["async/lag_min"], m["async/lag_mean"], m["async/lag_max"]) == (0.0, 0.0, 0.0)


class TooLong(FakeGenerator):
    """Reports the prompts in `ids` unsent, as a real generator reports a prompt too long for
    its max_model_len (rollout/base_generator.py `too_long`): no token, no version."""

    def __init__(self, ids: set[str], **kw):
        super().__init__(**kw)
        self.ids = ids

    def generate(self, samples, *, n, **kw):
        (sample,) = samples
        if sample.id not in self.ids:
            return super().generate(samples, n=n, **kw)
        self.calls.append((sample.id, kw.get("seed")))
        return [Rollout(sample_id=sample.id, task=sample.task, prompt_token_ids=(1,) * 9,
                        token_ids=(), logprobs=(), versions=(), finish_reason="prompt_too_long",
                        thinking_tokens=0, answer_tokens=0, completion="", group=i,
                        score=Score(status="error", detail="prompt too long")) for i in range(n)]


@pytest.mark.parametrize("max_lag", [0, 2])
def test_a_group_without_tokens_has_no_lag_and_is_never_sent_back(max_lag):
    """A too-long prompt's group was made by no policy: it is served once, whatever the
    trainer's version (it counted as version -1, so from step max_lag on it was sent back
    without end and the run waited forever), and it adds no lag to the batch's figures."""
    gen = TooLong({"p1", "p4", "p5"}, tokens=2, token_s=0.001)
    with make_pipeline(gen, CountingSampler(), max_lag=max_lag) as pipe:
        batches = train(pipe, gen, steps=5, step_s=0.02)
        m = pipe.metrics(batches[-1])
    assert [g.sample.id for b in batches for g in b.groups] == [f"p{i}" for i in range(10)]
    calls = [sample_id for sample_id, _ in gen.calls]
    assert all(calls.count(f"p{i}") == 1 for i in (1, 4, 5)), calls
    assert all(b.regenerated == 0 for b in batches)
    assert batches[2].lags == () and m["async/regenerated_total"] == 0  # p4, p5: no tokens
    assert all(0 <= lag <= max_lag for b in batches for lag in b.lags)
    assert len(batches[0].lags) == 2 and len(batches[1].lags) == 4  # p1's rollouts left out


def test_lag_metrics_of_a_batch_match_its_rollouts():
    gen = FakeGenerator(tokens=2, token_s=0.001)
    with make_pipeline(gen, CountingSampler(), max_lag=2) as pipe:
        batches = train(pipe, gen, steps=6, step_s=0.03)
        b = batches[-1]
        m = pipe.metrics(b)
    lags = [b.trainer_version - min(r.versions) for g in b.groups for r in g.rollouts]
    assert m["async/lag_min"] == min(lags) and m["async/lag_max"] == max(lags)
    assert m["async/lag_mean"] == pytest.approx(sum(lags) / len(lags))


def test_seed_of_a_prompt_is_the_run_seed_plus_its_batch_index():
    gen = FakeGenerator(tokens=1, token_s=0.0)
    with make_pipeline(gen, CountingSampler(), max_lag=0, n=4) as pipe:
        train(pipe, gen, steps=2)
    assert sorted(gen.calls)[:4] == [("p0", 100), ("p1", 100), ("p2", 101), ("p3", 101)]


def test_generator_failure_reaches_the_trainer_instead_of_hanging():
    gen = FakeGenerator(fail_on="p1")
    with make_pipeline(gen, CountingSampler(), max_lag=1) as pipe:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="generation failed.*engine crashed on p1"):
            pipe.take_batch(0, timeout_s=30.0)
        assert time.monotonic() - t0 < 5.0


def test_an_expired_batch_wait_is_a_checkpointed_stop():
    """`batch_wait_s` is the wait's limit; its expiry is a GeneratorUnavailable (the loop
    checkpoints and stops, exit 75), not an error that loses the run."""
    gen = FakeGenerator(tokens=1, score_s=lambda s: 1.0)
    with make_pipeline(gen, CountingSampler(), max_lag=0, batch_wait_s=0.2) as pipe, \
            pytest.raises(GeneratorUnavailable, match=r"batch 0 .*batch_wait_s, is 0.2 s"):
        pipe.take_batch(0)


class Stuck(FakeGenerator):
    """A generator that never finishes `hang_s` and reports progress only while `ticking`."""

    def __init__(self, ticking: bool, hang_s: float):
        super().__init__(tokens=1)
        self.ticking, self.hang_s, self.count = ticking, hang_s, 0

    def progress(self) -> int:
        self.count += self.ticking
        return self.count

    def generate(self, samples, **kw):
        time.sleep(self.hang_s)
        return super().generate(samples, **kw)


def test_the_wait_has_no_limit_while_generation_progresses_and_stops_on_a_stall(monkeypatch):
    monkeypatch.setattr(pipeline, "PROGRESS_EVERY_S", 0.05)  # read progress often (test speed)
    slow = Stuck(ticking=True, hang_s=1.2)  # slower than the stall limit, but progressing
    with make_pipeline(slow, CountingSampler(), max_lag=0, stall_s=0.4) as pipe:
        assert pipe.take_batch(0).index == 0
    stuck = Stuck(ticking=False, hang_s=30.0)
    pipe = make_pipeline(stuck, CountingSampler(), max_lag=0, stall_s=0.4).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(GeneratorUnavailable, match=r"no group completed and no token was "
                           r"generated for \d+ s .*stall_s, is 0.4 s.*batch 0"):
            pipe.take_batch(0)
        assert time.monotonic() - t0 < 3.0
    finally:
        pipe.stop(drain_s=0)  # the hung generate threads are daemons: leave them


def test_exhausted_sampler_serves_every_full_batch_then_stops():
    gen = FakeGenerator(tokens=1)
    with make_pipeline(gen, CountingSampler(limit=5), max_lag=1) as pipe:
        assert len(train(pipe, gen, steps=2)) == 2  # prompts 0-3; prompt 4 has no partner
        with pytest.raises(StopIteration, match="batch 2 can never be complete"):
            pipe.take_batch(2, timeout_s=10.0)


def test_a_failing_sampler_fails_the_batch_that_needs_it():
    class Failing(CountingSampler):
        def __call__(self) -> Sample:
            if self.pos == 3:
                raise RuntimeError("every training prompt is retired")
            return super().__call__()

    gen = FakeGenerator(tokens=1)
    with make_pipeline(gen, Failing(), max_lag=1) as pipe:
        train(pipe, gen, steps=1)
        with pytest.raises(BufferClosed) as info:
            pipe.take_batch(1, timeout_s=10.0)
    assert "every training prompt is retired" in str(info.value.__cause__)


def test_checkpoint_mid_run_resumes_without_repeating_or_skipping():
    gen = FakeGenerator(tokens=3, token_s=0.003, score_s=lambda s: 0.02)
    sampler = CountingSampler()
    with make_pipeline(gen, sampler, max_lag=2) as pipe:
        before = train(pipe, gen, steps=3, step_s=0.01)
        state = pipe.state_dict()  # taken while prompts are in flight: the "SIGKILL" point
    assert state["sampler"]["pos"] == state["buffer"]["next_seq"]
    in_flight = [d for d in state["buffer"]["slots"] if d["rollouts"] is None]
    assert in_flight  # the test is meaningful only if something was in flight

    gen2, sampler2 = FakeGenerator(tokens=3, token_s=0.003), CountingSampler()
    resumed = make_pipeline(gen2, sampler2, max_lag=2, trainer_version=3)
    gen2.update_weights(3)
    resumed.load_state_dict(state)
    with resumed:
        after = train(resumed, gen2, steps=4, start_version=3)
    ids = [g.sample.id for b in before + after for g in b.groups]
    assert ids == [f"p{i}" for i in range(14)]
    assert {sid for sid, _ in gen2.calls} >= {d["sample"]["id"] for d in in_flight}


def test_state_dict_is_consistent_while_the_driver_admits():
    gen = FakeGenerator(tokens=1, token_s=0.0)
    sampler = CountingSampler()
    with make_pipeline(gen, sampler, max_lag=50, groups_per_batch=1, max_in_flight=4) as pipe:
        t = threading.Thread(target=lambda: train(pipe, gen, steps=40))
        t.start()
        while t.is_alive():
            s = pipe.state_dict()
            assert s["sampler"]["pos"] == s["buffer"]["next_seq"]
        t.join()


def test_the_in_flight_cap_is_the_lag_window_unless_set_then_whole_prompts_within_it():
    # The paper's setup (B=48 prompts x n=16, max_lag 8): the lag window is 48 x 9 = 432
    # prompts (6,912 rollouts), the default; a set cap in rollouts becomes whole prompts, at
    # least one batch (48), at most the window.
    kw = dict(n=16, groups_per_batch=48, max_lag=8)
    assert in_flight_prompts(**kw) == 432
    assert in_flight_prompts(**kw, rollouts=1000) == 63  # ceil(1000 / 16)
    assert in_flight_prompts(**kw, rollouts=100) == 48
    assert in_flight_prompts(**kw, rollouts=10**6) == 432


def test_prompts_in_flight_follow_the_cap_and_carry_their_age_as_priority():
    class Engines(FakeGenerator):
        """Counts the prompts generating at once."""

        def __init__(self):
            super().__init__(tokens=3, token_s=0.01)
            self.now = self.most = 0
            self.lock = threading.Lock()

        def generate(self, samples, **kw):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                return super().generate(samples, **kw)
            finally:
                with self.lock:
                    self.now -= 1

    gen = Engines()
    # a cap of 4 prompts: above one batch (3), far below the window (3 x 9)
    with make_pipeline(gen, CountingSampler(), max_lag=8, groups_per_batch=3,
                       max_in_flight=4) as pipe:
        assert pipe.max_in_flight == 4
        train(pipe, gen, steps=4)
    assert gen.most == 4
    assert sorted(gen.priorities)[:3] == [("p0", 0), ("p1", 1), ("p10", 10)]
    assert all(p == int(sid[1:]) for sid, p in gen.priorities)


def test_a_finished_rollout_frees_its_place_while_its_prompts_longest_rollout_runs():
    """With a streaming generator the cap counts unfinished rollouts: one long rollout does not
    hold its prompt's n places (a prompt-granular cap starved the engine: x1.10 instead of
    x1.96 in `scalerl bench pipeline`, docs/measurements.md)."""
    release = threading.Event()

    class Streaming(FakeGenerator):
        """Rollout 0 of p0 runs until released; every other rollout finishes at once."""

        def stream(self, samples, *, n, **kw):
            (sample,) = samples
            rollouts = super().generate(samples, n=n, **kw)  # records the call
            yield from rollouts[1:]
            if sample.id == "p0":
                assert release.wait(10), "never released"
            yield rollouts[0]

    gen = Streaming(tokens=1, token_s=0.0)
    # one prompt (4 rollouts) in flight: p0's three short rollouts free three places, so p1
    # (4 more) is admitted once 1 + 0 < 4, while p0's long rollout still runs; p1 finishes
    # whole, then p2, then p3: the lag bound (max_lag 3, one group a batch) stops at p3
    with make_pipeline(gen, CountingSampler(), max_lag=3, groups_per_batch=1, n=4,
                       max_in_flight=1) as pipe:
        deadline = time.monotonic() + 5
        while "p3" not in [c[0] for c in gen.calls] and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # nothing more may start: p4 is past the lag bound
        started = [c[0] for c in gen.calls]
        release.set()
        (batch,) = train(pipe, gen, steps=1)
    assert started == ["p0", "p1", "p2", "p3"], started  # all with p0 unfinished
    assert [r.group for r in batch.groups[0].rollouts] == [0, 1, 2, 3]  # in group order


def test_a_continuation_goes_before_first_phases_of_its_own_and_newer_prompts():
    # (prompt age, continuation first): 2p for a first phase, 2p - 1 for its continuation
    assert [phase_priority(p, c) for p in (0, 1, 5) for c in (True, False)] == [
        -1, 0, 1, 2, 9, 10]
    assert phase_priority(3, True) < phase_priority(3, False) < phase_priority(4, False)
    assert phase_priority(3, False) < phase_priority(4, True)  # an older prompt first


@pytest.mark.slow
def test_real_engine_keeps_the_lag_bound_through_in_flight_publishes(engine, tiny_model_path):
    """The vLLM engine and the files publisher: each step's weights land while the next
    prompts are generating; every batch keeps lag <= max_lag and tokens carry real versions."""
    from scalerl.envs.catalog import get_task
    from scalerl.trainer.publish import FilesPublisher

    base = checkpoint(tiny_model_path)
    samples = iter(get_task("arith").samples("train"))
    v0 = engine.version
    pub = FilesPublisher(engine, timeout_s=120.0)
    try:
        with PipelineRL(engine, lambda: next(samples), n=2, groups_per_batch=2, max_lag=1,
                        budget=Budget(thinking=32, answer=16), temperature=1.0, seed=0,
                        trainer_version=v0) as pipe:
            for step in range(4):
                batch = pipe.take_batch(v0 + step, timeout_s=300.0)
                assert set(batch.lags) <= {0, 1}
                versions = {v for r in batch.rollouts for v in r.versions}
                assert versions <= set(range(v0, v0 + step + 1))
                assert all(r.score.status in ("correct", "wrong", "no_answer")
                           for r in batch.rollouts)
                scaled = {k: t * (1 + 1e-3 * (step + 1)) if k == "lm_head.weight" else t
                          for k, t in base.items()}
                pub.publish(scaled, v0 + step + 1)
    finally:  # the engine is shared by the session: put its weights and version back
        engine.update_weights(list(base.items()), v0, timeout_s=120.0)
