"""LoRA on the in-process engine (slow: one LoRA engine for this module, ~1 min to start).

A published adapter must change the engine's log-probs and match what the trainer's PEFT model
computes (the mismatch KL as small as full fine-tuning's); each version's requests sample under
their own adapter on the same prompt; a request in flight at a publish finishes under the adapter
it started with, its tokens labelled with that version, and the old adapter is unloaded once no
request uses it. Adapters: tests/lora_models.py (random nonzero B).
"""

from __future__ import annotations

import threading
import time

import pytest
from lora_models import SERVING, adapter_state, mismatch, peft_adapter
from tiny_rollouts import arith

from scalerl.rollout.types import Budget
from scalerl.rollout.weights import WeightUpdateError

pytestmark = pytest.mark.slow

TEMPERATURE = 0.7
KL_BOUND = 1e-8
"""Mismatch KL bound (k3, mean per token): fp32 on CPU gave ~1e-9 for full fine-tuning
(tests/rollout/test_engine.py); a LoRA that moved nothing but the engine's matmul order stays
far below this, a wrong or missing adapter gives ~1e-2 or more."""


@pytest.fixture(scope="module")
def lora_engine(tiny_model_path, engine_config):
    from dataclasses import replace

    from session_tasks import session_scorer

    from scalerl.rollout.engine import EngineGenerator

    generator = EngineGenerator(tiny_model_path, config=replace(engine_config, lora=SERVING),
                                scorer=session_scorer())
    yield generator
    generator.close()


@pytest.fixture(scope="module")
def adapters(tiny_model_path):
    return {seed: peft_adapter(tiny_model_path, seed) for seed in (1, 2, 3, 4)}


SHORT = Budget(thinking=16, answer=24)


def rollouts(engine, limit=8, n=2, seed=3):
    return engine.generate(arith(limit), n=n, budget=SHORT, temperature=TEMPERATURE,
                           seed=seed, score=False)


def test_a_published_adapter_changes_logprobs_and_matches_peft(lora_engine, adapters,
                                                                tiny_model_path):
    from transformers import AutoModelForCausalLM

    base_model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    v0 = lora_engine.version
    assert v0 == 0
    before = rollouts(lora_engine)
    kl0, _, _ = mismatch(before, {0: base_model}, TEMPERATURE)
    t = time.perf_counter()
    timings = lora_engine.update_adapter(adapter_state(adapters[1]).items(), 1)
    print(f"\nadapter publish: {time.perf_counter() - t:.3f} s {timings}")
    after = rollouts(lora_engine)
    assert {v for r in after for v in r.versions} == {1}
    kl, worst, count = mismatch(after, {1: adapters[1]}, TEMPERATURE)
    stale, _, _ = mismatch(after, {1: base_model}, TEMPERATURE)  # as if the base still sampled
    print(f"mismatch KL base {kl0:.3e}; adapter v1 {kl:.3e} max|dlogp| {worst:.3e} over "
          f"{count} tokens; v1 tokens scored by the base: {stale:.3e}")
    assert count > 100
    assert kl0 <= KL_BOUND and kl <= KL_BOUND and worst <= 1e-3
    assert stale > 1e-3  # the adapter changed the engine's policy


def test_each_version_samples_under_its_own_adapter_on_the_same_prompt(lora_engine, adapters):
    logprobs = {}
    for version, seed in ((lora_engine.version + 1, 2), (lora_engine.version + 2, 3)):
        lora_engine.update_adapter(adapter_state(adapters[seed]).items(), version)
        got = rollouts(lora_engine, limit=2, n=2, seed=0)
        assert {v for r in got for v in r.versions} == {version}
        kl, worst, _ = mismatch(got, {version: adapters[seed]}, TEMPERATURE)
        wrong, _, _ = mismatch(got, {version: adapters[5 - seed]}, TEMPERATURE)
        assert kl <= KL_BOUND and worst <= 1e-3, (version, kl)
        assert wrong > 1e-3, (version, wrong)
        logprobs[version] = got[0].logprobs
    first, second = logprobs.values()
    assert first != second
    assert set(lora_engine.adapters()) == {lora_engine.version}  # the older one unloaded


def test_a_request_in_flight_keeps_its_adapter_and_version(lora_engine, adapters):
    old = lora_engine.version + 1
    lora_engine.update_adapter(adapter_state(adapters[4]).items(), old)
    results, budget = [], Budget(thinking=96, answer=32)

    def consume():
        results.extend(lora_engine.stream(arith(8), n=2, budget=budget, temperature=1.0,
                                          seed=5, score=False))

    worker = threading.Thread(target=consume)
    worker.start()
    deadline = time.monotonic() + 120
    while (not any(c >= 4 for c in lora_engine.in_flight().values())
           and time.monotonic() < deadline):
        time.sleep(0.005)
    lora_engine.update_adapter(adapter_state(adapters[1]).items(), old + 1)
    during = lora_engine.adapters()
    worker.join(timeout=300)
    assert len(results) == 16
    assert during.get(old, 0) > 0, during  # requests still ran under the old adapter
    versions = {v for r in results for v in r.versions}
    assert old in versions
    kl, worst, count = mismatch(results, {old: adapters[4], old + 1: adapters[1]}, 1.0)
    print(f"\nin-flight publish: adapters during it {during}; versions {sorted(versions)}; "
          f"mismatch KL {kl:.3e} max|dlogp| {worst:.3e} over {count} tokens")
    assert kl <= KL_BOUND and worst <= 1e-3
    for r in results:  # a request is never switched: versions only grow between its phases
        assert list(r.versions) == sorted(r.versions)
    # A rollout cut at its thinking budget continues in a new request under the new adapter,
    # with its first phase's cache salt: vLLM keys its prefix cache by adapter name, so the
    # continuation recomputes the prefix under the new adapter (the KL above checks it).
    straddlers = [r for r in results if r.min_version == old and r.max_version == old + 1]
    assert straddlers, [sorted(set(r.versions)) for r in results]
    assert set(lora_engine.adapters()) == {old + 1}


def test_bad_adapter_updates_raise_and_keep_the_version(lora_engine, tiny_model_path):
    from tiny_rollouts import checkpoint

    version = lora_engine.version
    with pytest.raises(WeightUpdateError, match="not a PEFT LoRA tensor name"):
        lora_engine.update_adapter(checkpoint(tiny_model_path).items(), version + 1)
    with pytest.raises(WeightUpdateError, match="versions must grow"):
        lora_engine.update_adapter([], version)
    with pytest.raises(WeightUpdateError, match="publish with update_adapter"):
        lora_engine.update_weights(checkpoint(tiny_model_path).items(), version + 1)
    assert lora_engine.version == version


def test_the_lora_publisher_moves_only_the_adapter(lora_engine, adapters, tiny_model_path):
    import json
    from pathlib import Path

    from tiny_rollouts import checkpoint

    from scalerl.trainer.publish import LoraPublisher, PublishError, make_publisher

    publisher = make_publisher("files", lora_engine, timeout_s=60)
    assert isinstance(publisher, LoraPublisher)
    version = lora_engine.version + 1
    state = adapter_state(adapters[2])
    stats = publisher.publish({n: publisher.prepare(t) for n, t in state.items()}, version)
    config = json.loads((Path(tiny_model_path) / "config.json").read_text())
    h, i, r = config["hidden_size"], config["intermediate_size"], SERVING.rank
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    # A is r x in, B is out x r: q, k, v (h -> q, kv, kv), o (q -> h), gate/up (h -> i), down
    per_layer = r * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    assert stats.num_tensors == 2 * 7 * config["num_hidden_layers"]
    assert stats.num_bytes == 4 * per_layer * config["num_hidden_layers"]
    full = 4 * sum(t.numel() for t in checkpoint(tiny_model_path).values())
    assert publisher.full_model_bytes == full
    print(f"\nLoRA publish of the tiny model: {stats.num_bytes} B in {stats.send_s * 1e3:.1f} ms "
          f"({stats.num_tensors} tensors); the full weights are {full} B "
          f"({full / stats.num_bytes:.0f}x)")
    assert lora_engine.version == version
    with pytest.raises(PublishError, match="not a PEFT LoRA tensor name"):
        publisher.publish(checkpoint(tiny_model_path), version + 1)
    assert lora_engine.version == version
    with pytest.raises(ValueError, match="must exceed"):
        publisher.publish(state, version)
