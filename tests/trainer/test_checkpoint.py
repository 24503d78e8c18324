"""Checkpoints: HF-loadable, atomic, pruned, and restoring RNG state."""

import random

import torch
from conftest import tiny_qwen2

from scalerl.trainer.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_state,
    save_checkpoint,
    set_rng_state,
)


def test_checkpoint_is_a_transformers_model_dir_plus_state(tmp_path):
    from transformers import AutoModelForCausalLM

    model = tiny_qwen2()
    path = save_checkpoint(tmp_path, 3, model, None, {"extra": 7})
    assert path.name == "step-000003" and (path / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(path)
    for (n, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(),
                              strict=True):
        torch.testing.assert_close(b, a, msg=n)
    state = load_state(path)
    assert state["extra"] == 7 and state["step"] == 3


def test_only_complete_checkpoints_count_and_old_ones_are_pruned(tmp_path):
    model = tiny_qwen2()
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, model, None, {}, keep=2)
    (tmp_path / "checkpoints" / ".tmp-step-000008").mkdir()  # a killed write
    (tmp_path / "checkpoints" / "step-000010").mkdir()  # no trainer_state.pt
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000004", "step-000006"]
    assert latest_checkpoint(tmp_path).name == "step-000006"


def test_rng_state_restores_the_same_draws(tmp_path):
    path = save_checkpoint(tmp_path, 1, tiny_qwen2(), None, {})
    expected = (random.random(), torch.rand(3))
    set_rng_state(load_state(path)["rng"])
    got = (random.random(), torch.rand(3))
    assert got[0] == expected[0]
    torch.testing.assert_close(got[1], expected[1])
