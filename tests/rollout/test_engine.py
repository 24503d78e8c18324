"""The Generator through real vLLM on the tiny model (slow: shares the session engine).

Engine-heavy assertions are grouped into a few tests so the suite starts vLLM once. Tests that
change the weights restore the checkpoint's weights before returning.
"""

from __future__ import annotations

import math
import os
import threading
import time

import pytest
import torch
from tiny_rollouts import arith, checkpoint, straddlers, uniform_logprob, zero_head

from scalerl.envs.base import Sample
from scalerl.rollout.types import INTERRUPTION_PHRASE, Budget
from scalerl.rollout.weights import WeightUpdateError

pytestmark = pytest.mark.slow


def test_small_thinking_budget_interrupts_and_large_budget_stops(engine):
    phrase_ids = engine.tokenizer.encode(INTERRUPTION_PHRASE, add_special_tokens=False)
    small = Budget(thinking=4, answer=24)
    rollouts = engine.generate(arith(24), n=2, budget=small, temperature=1.0, seed=1)
    assert len(rollouts) == 48
    # Forced: the phrase went in (then the answer either ended, `interrupted`, or ran into the
    # answer budget, `truncated`). The tiny model closes its thinking after ~15 tokens, so 4
    # must force nearly every rollout.
    forced_rollouts = [r for r in rollouts if None in r.logprobs]
    assert len(forced_rollouts) >= 0.9 * len(rollouts)
    interrupted = [r for r in rollouts if r.finish_reason == "interrupted"]
    assert interrupted
    assert all(r.finish_reason in ("interrupted", "truncated") for r in forced_rollouts)
    # Every forced rollout says so, those whose answer then ran out of budget too.
    assert [r.interrupted for r in rollouts] == [None in r.logprobs for r in rollouts]
    assert any(r.interrupted and r.finish_reason == "truncated" for r in rollouts)
    for r in rollouts:
        forced = [i for i, lp in enumerate(r.logprobs) if lp is None]
        sampled = len(r.token_ids) - len(forced)
        assert sampled <= 4 + 24
        assert len(r.versions) == len(r.token_ids) == len(r.logprobs)
        if r.finish_reason in ("interrupted", "truncated") and forced:
            assert r.completion.count(INTERRUPTION_PHRASE) == 1
            assert forced == list(range(4, 4 + len(phrase_ids)))  # right after the 4 sampled
            assert [r.token_ids[i] for i in forced] == phrase_ids
    for r in interrupted:
        assert r.thinking_tokens == 4 + len(phrase_ids)
        assert r.answer_tokens == len(r.token_ids) - r.thinking_tokens

    large = engine.generate(arith(24), n=2, budget=Budget(thinking=256, answer=64),
                            temperature=1.0, seed=1)
    stopped = [r for r in large if r.finish_reason == "stop"]
    assert len(stopped) >= 0.9 * len(large)
    assert all(None not in r.logprobs and not r.interrupted for r in large)
    assert all(INTERRUPTION_PHRASE not in r.completion for r in large)
    assert {r.score.status for r in large} <= {"correct", "wrong", "no_answer"}


def test_stream_yields_every_rollout_once_with_group_indices(engine):
    samples = arith(5)
    seen = list(engine.stream(iter(samples), n=3, budget=Budget(thinking=64, answer=16),
                              seed=2, score=False, max_in_flight=4))
    keys = sorted((r.meta["index"], r.group) for r in seen)
    assert keys == [(i, g) for i in range(5) for g in range(3)]
    assert all(r.sample_id == samples[r.meta["index"]].id for r in seen)


def test_seeded_generation_is_reproducible(engine):
    budget = Budget(thinking=64, answer=16)
    a = engine.generate(arith(6), n=2, budget=budget, temperature=1.0, seed=7, score=False)
    b = engine.generate(arith(6), n=2, budget=budget, temperature=1.0, seed=7, score=False)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]


def test_vllm_logprobs_match_hugging_face_forward(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    temperature = 0.7  # processed logprobs must be log_softmax(logits / T)
    rollouts = engine.generate(arith(16), n=2, budget=Budget(thinking=8, answer=24),
                               temperature=temperature, seed=3, score=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    diffs, k3 = [], []
    for r in rollouts:
        ids = torch.tensor([list(r.prompt_token_ids) + list(r.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(r.prompt_token_ids) - 1 : -1].float()
        hf = torch.log_softmax(logits / temperature, dim=-1)
        hf = hf.gather(1, torch.tensor(r.token_ids)[:, None])[:, 0]
        for lp_gen, lp_hf in zip(r.logprobs, hf.tolist(), strict=True):
            if lp_gen is None:
                continue
            diffs.append(lp_gen - lp_hf)
            ratio = lp_hf - lp_gen
            k3.append(math.exp(ratio) - 1 - ratio)
    kl = sum(k3) / len(k3)
    max_abs = max(abs(d) for d in diffs)
    print(f"\nmismatch KL(gen||hf) k3={kl:.3e} k1={sum(diffs) / len(diffs):.3e} "
          f"max|dlogp|={max_abs:.3e} over {len(diffs)} tokens")
    assert len(diffs) > 200
    assert kl <= 1e-3
    assert max_abs <= 1e-2


def test_update_weights_in_flight_changes_logprobs_and_versions(engine, tiny_model_path):
    base = checkpoint(tiny_model_path)
    v0 = engine.version
    budget = Budget(thinking=160, answer=64)
    sample = arith(1)
    before = engine.generate(sample, n=1, budget=budget, temperature=0.0, seed=0, score=False)[0]
    assert set(before.versions) == {v0}

    # Under a zero LM head rollouts run on to their budgets (see tiny_rollouts), so the update
    # back to the checkpoint lands while they run (the tiny model's own end in about 30 tokens).
    uniform = uniform_logprob(base)
    engine.update_weights(zero_head(base), v0 + 1)
    after = engine.generate(sample, n=1, budget=budget, temperature=0.0, seed=0, score=False)[0]
    assert set(after.versions) == {v0 + 1}
    assert after.logprobs[0] == pytest.approx(uniform, abs=2e-6)
    assert after.logprobs != before.logprobs

    results = []

    def consume():
        for r in engine.stream(arith(16), n=2, budget=budget, temperature=1.0, seed=5,
                               score=False):
            results.append(r)

    worker = threading.Thread(target=consume)
    worker.start()
    deadline = time.monotonic() + 120
    while not any(c >= 4 for c in engine.in_flight().values()) and time.monotonic() < deadline:
        time.sleep(0.005)
    timings = engine.update_weights(base.items(), v0 + 2, timeout_s=60)
    worker.join(timeout=300)
    print(f"\nin-flight update timings: {timings}")
    assert engine.version == v0 + 2
    assert len(results) == 32
    assert straddlers(results, v0 + 1, v0 + 2, uniform), "no rollout straddled the update"

    restored = engine.generate(sample, n=1, budget=budget, temperature=0.0, seed=0,
                               score=False)[0]
    assert restored.token_ids == before.token_ids
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-5)
    assert set(restored.versions) == {v0 + 2}


def test_failed_weight_updates_raise_and_keep_the_version(engine, tiny_model_path):
    base = checkpoint(tiny_model_path)
    v = engine.version
    with pytest.raises(WeightUpdateError, match="unknown tensor 'lm_head.bogus'"):
        engine.update_weights([("lm_head.bogus", base["lm_head.weight"])], v + 1)
    with pytest.raises(WeightUpdateError, match="has shape"):
        engine.update_weights([("lm_head.weight", base["lm_head.weight"][:3])], v + 1)
    with pytest.raises(WeightUpdateError, match="timed out"):
        engine.update_weights([("lm_head.weight", base["lm_head.weight"])], v + 1,
                              timeout_s=1e-6)
    assert engine.version == v
    # The engine still generates afterwards.
    (r,) = engine.generate(arith(1), n=1, budget=Budget(thinking=32, answer=16), seed=0,
                           score=False)
    assert r.token_ids and set(r.versions) == {v}


def test_a_prompt_too_long_is_reported_not_sent_and_the_rest_generate(engine):
    budget = Budget(thinking=32, answer=16)
    longest = budget.hard_cap(len(engine.tokenizer.encode(INTERRUPTION_PHRASE,
                                                          add_special_tokens=False)))
    room = engine.max_model_len - longest
    long = Sample(id="long", task="arith", prompt="1+" * room + "1=")
    fits = arith(2)
    rollouts = engine.generate([fits[0], long, fits[1]], n=2, budget=budget, seed=0)
    assert [(r.sample_id, r.group) for r in rollouts] == [
        (fits[0].id, 0), (fits[0].id, 1), ("long", 0), ("long", 1), (fits[1].id, 0),
        (fits[1].id, 1)]
    for r in rollouts[2:4]:
        assert r.finish_reason == "prompt_too_long" and r.token_ids == () and r.logprobs == ()
        assert len(r.prompt_token_ids) + longest > engine.max_model_len
        assert r.score.status == "error" and "prompt too long" in r.score.detail
        assert f"> max_model_len {engine.max_model_len}" in r.score.detail
    assert all(r.token_ids and r.finish_reason != "prompt_too_long"
               for r in rollouts[:2] + rollouts[4:])


def test_memory_is_explicit_and_reported(engine, engine_config):
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == str(engine_config.kv_cache_space_cpu) == "1"
    mem = engine.memory()
    print(f"\nengine resident memory: {mem}")
    assert mem["processes"] >= 2  # this process + the engine core (+ its worker)
    assert 0 < mem["children_mb"] < 8 * 1024


def test_the_engine_reports_what_it_computes_with(engine, engine_config):
    # Read back from vLLM's own workers (rollout/vllm_worker.py), not from the arguments.
    assert engine.engine_info == {"head_dtype": "float32", "dtype": "float32",
                                  "max_model_len": engine_config.max_model_len}
    assert engine.head_dtype == "float32"


def test_engine_start_freezes_the_gc_heap(engine):
    import gc

    # the torch/transformers/vLLM heap is never rescanned by a full collection
    assert gc.get_freeze_count() > 100_000


def test_a_prefix_computed_before_an_update_is_not_reused_after_it(engine, tiny_model_path):
    """An in-place reload keeps vLLM's prefix cache; each request is salted with its policy
    version, so the first request after an update recomputes the prompt under the new weights
    (its first logprobs match a fresh forward of the new model), while requests of one version
    still share the prompt's blocks (128 tokens each on CPU)."""
    from transformers import AutoModelForCausalLM

    base = checkpoint(tiny_model_path)
    key = "model.layers.0.self_attn.k_proj.weight"
    changed = {**base, key: base[key] * 2.0}  # layer 0's keys change: the prompt's KV changes
    long = [Sample(id="long", task="arith", prompt="1+" * 100 + "1=")]
    v = engine.version

    def sample(seed: int):
        (r,) = engine.generate(long, n=1, budget=Budget(thinking=None, answer=4),
                               temperature=1.0, seed=seed, score=False)
        return r

    sample(1)
    assert sample(2).meta["cached_tokens"] >= 128
    engine.update_weights(changed.items(), v + 1)
    try:
        after = sample(3)
        assert after.meta["cached_tokens"] == 0
        assert sample(4).meta["cached_tokens"] >= 128
    finally:
        engine.update_weights(base.items(), v + 2)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    model.load_state_dict(changed, strict=False)
    ids = torch.tensor([list(after.prompt_token_ids) + list(after.token_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(after.prompt_token_ids) - 1: -1]
    fresh = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(after.token_ids)[:, None])
    assert list(after.logprobs) == pytest.approx(fresh[:, 0].tolist(), abs=1e-4)
