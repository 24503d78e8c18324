"""The LoRA adapters' bookkeeping (rollout/lora_adapters.py), no engine: which version a request
samples under, when an old adapter may be unloaded, what a published adapter must look like."""

from __future__ import annotations

import pytest
import torch

from scalerl.rollout.lora import LoraServing, adapter_name
from scalerl.rollout.lora_adapters import Adapters
from scalerl.rollout.weights import WeightUpdateError

A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
B = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"


def adapter(value: float = 1.0):
    return [(A, torch.full((4, 8), value)), (B, torch.full((8, 4), value))]


@pytest.fixture
def adapters(tmp_path):
    return Adapters(LoraServing(rank=4, alpha=8.0), tmp_path, "base-model")


def test_version_0_is_the_base_and_requests_keep_the_adapter_they_started_with(adapters):
    assert adapters.enter() == (0, None)  # nothing published: the base model
    path, tensors, size = adapters.stage(adapter(), 1)
    assert (tensors, size) == (2, 2 * 32 * 4)  # two 32-element fp32 matrices
    assert (path / "adapter_config.json").is_file()
    assert adapters.publish(1, path) == []  # version 0 is no adapter: nothing to unload
    assert adapters.enter() == (1, adapter_name(1))
    two, _, _ = adapters.stage(adapter(2.0), 2)
    assert adapters.publish(2, two) == []  # v1 still has a request in flight
    assert adapters.in_use() == {0: 1, 1: 1}
    assert adapters.leave(0) == []
    assert adapters.leave(1) == [1]  # its last request ended: unload v1 now, once
    assert adapters.leave(2) == [] and set(adapters.loaded()) == {2}
    adapters.retired(1)
    assert not path.exists() and two.exists()


def test_an_adapter_nobody_uses_is_retired_at_the_next_publish(adapters):
    for version in (1, 2, 3):
        path, _, _ = adapters.stage(adapter(), version)
        idle = adapters.publish(version, path)
        assert idle == ([version - 1] if version > 1 else [])
        for v in idle:
            adapters.retired(v)
    assert set(adapters.loaded()) == {3}


def test_bad_adapters_are_refused_with_the_reason(adapters, tmp_path):
    with pytest.raises(WeightUpdateError, match="'model.embed_tokens.weight' is not a PEFT"):
        adapters.stage([("model.embed_tokens.weight", torch.zeros(2))], 1)
    with pytest.raises(WeightUpdateError, match="no adapter tensors"):
        adapters.stage([], 1)
    path, _, _ = adapters.stage(adapter(), 1)
    adapters.publish(1, path)
    with pytest.raises(WeightUpdateError, match="versions must grow; the current one is 1"):
        adapters.stage(adapter(), 1)
    assert list(tmp_path.iterdir()) == [path]  # nothing left behind by the refusals
