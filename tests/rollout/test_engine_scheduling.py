"""The engine's queue on real vLLM (slow: shares the session engine): requests carry their
rollout's priority (an older prompt's continuation ahead of newer prompts), and a continuation
after a forced interruption reuses its first phase's KV blocks even when new weights arrived in
between (PipelineRL's in-flight updates)."""

from __future__ import annotations

import asyncio

import pytest
from tiny_rollouts import checkpoint

from scalerl.envs.base import Sample
from scalerl.rollout.base_generator import phase_priority
from scalerl.rollout.types import Budget

pytestmark = pytest.mark.slow


def test_an_older_prompts_continuation_is_scheduled_before_queued_newer_prompts(engine):
    """300 first phases of newer prompts (more than the engine's 256 sequences) arrive first,
    youngest first, then an older prompt's continuation; all wait in the paused engine's queue,
    then it resumes. First-come would run the continuation after 256 of them; priority runs it
    in the first step, with the 255 oldest of the newer prompts."""
    assert engine.concurrency() == 256  # the session engine's max_num_seqs
    prompt = engine.prompt_ids(Sample(id="q", task="arith", prompt="1+1="))
    finished: list[int] = []
    newer = list(range(399, 99, -1))  # admission numbers, youngest first

    async def one(seq: int, continuation: bool, max_tokens: int) -> None:
        await engine._sample(prompt + [seq % 200 + 20], max_tokens, 1.0, seq,
                             priority=phase_priority(seq, continuation))
        finished.append(seq)

    async def run() -> None:
        llm = engine._llm
        await llm.pause_generation(mode="keep", clear_cache=False)  # queue, do not schedule
        tasks = [asyncio.ensure_future(one(seq, False, 4)) for seq in newer]
        await asyncio.sleep(0.2)
        tasks.append(asyncio.ensure_future(one(0, True, 1)))
        while len(llm.output_processor.request_states) < len(tasks):
            await asyncio.sleep(0.01)
        await llm.resume_generation()
        await asyncio.gather(*tasks)

    engine._call(run(), 120, "the queued requests")
    before = finished.index(0)
    assert before < 20, f"{before} newer first phases finished before the older continuation"
    rank = {seq: i for i, seq in enumerate(finished)}
    oldest, youngest = sorted(newer)[:255], sorted(newer)[255:]
    mean = lambda seqs: sum(rank[s] for s in seqs) / len(seqs)  # noqa: E731
    assert mean(oldest) < mean(youngest)  # the youngest 45 came first but waited


def test_a_continuation_reuses_its_first_phase_blocks_across_a_weight_update(engine,
                                                                             tiny_model_path):
    """A forced interruption with new weights published between the two phases (as a trainer
    step does mid-rollout): the continuation takes its first phase's cache salt, so its prompt's
    blocks (128 tokens each on CPU) come from the prefix cache; each phase is sent with its
    priority (admission number 7: 14 for the first phase, 13 for the continuation)."""
    base = checkpoint(tiny_model_path)
    v = engine.version
    real = engine._sample
    sent: list[int] = []

    async def sample(prompt, *args, priority=0, **kw):
        sent.append(priority)
        if sent.count(13) == 1 and priority == 13:  # the first continuation: a new policy first
            await asyncio.to_thread(engine.update_weights, base.items(), v + 1)
        return await real(prompt, *args, priority=priority, **kw)

    # 245 prompt tokens; with this prompt the tiny model never closes its thinking in 4 tokens
    digits = "+".join(str(i % 10) for i in range(120)) + "="
    long = [Sample(id="digits", task="arith", prompt=digits)]
    engine._sample = sample
    try:
        rollouts = engine.generate(long, n=4, budget=Budget(thinking=4, answer=4), seed=3,
                                   score=False, priority=7)
    finally:
        del engine._sample
    assert sorted(sent) == [13] * 4 + [14] * 4  # every rollout continued (thinking budget 4)
    assert all(r.interrupted for r in rollouts)
    for r in rollouts:
        assert set(r.versions) == {v, v + 1}
        assert r.meta["continuation_cached_tokens"] >= 128


def test_validation_beside_training_holds_at_most_its_share_of_the_engine(engine):
    """Held-out validation (priority 0) in a lane of share 2/256 (2 of the session engine's
    256 sequences) while a training call (priority 10) generates beside it: vLLM is handed at
    most 2 validation requests at once, the training ones all at once; the same validation
    without the lane hands it all 8 at once (what let it take every slot)."""
    from concurrent.futures import ThreadPoolExecutor

    from scalerl.rollout.admission import Lane

    now, most = {"val": 0, "train": 0}, {"val": 0, "train": 0}
    real = engine._llm.generate

    def spy(request, params, rid, priority=0, **kwargs):  # observes, changes nothing
        async def passed():
            key = "val" if priority <= 0 else "train"
            now[key] += 1
            most[key] = max(most[key], now[key])
            try:
                async for out in real(request, params, rid, priority=priority, **kwargs):
                    yield out
            finally:
                now[key] -= 1
        return passed()

    def samples(tag: str) -> list[Sample]:
        return [Sample(id=f"{tag}{i}", task="arith", prompt=f"{i}+{i}=") for i in range(4)]

    budget = Budget(thinking=24, answer=8)
    engine._llm.generate = spy
    try:
        for lane, expected in ((Lane("validation", 2 / 256), 2), (None, 8)):
            most.update(val=0, train=0)
            with ThreadPoolExecutor(1) as pool:
                training = pool.submit(engine.generate, samples("t"), n=2, budget=budget,
                                       score=False, priority=10)
                validation = engine.generate(samples("v"), n=2, budget=budget, score=False,
                                             lane=lane)
                trained = training.result(timeout=120)
            assert len(validation) == len(trained) == 8
            assert most == {"val": expected, "train": 8}, lane
    finally:
        del engine._llm.generate  # the AsyncLLM's own method again
    assert engine._admission.held == 0 and engine._admission.waiting == 0
