"""`scalerl eval --model` on a LoRA run's checkpoints: a checkpoint holding `adapter/` (PEFT's
layout, written with rollout/lora.py `write_adapter`) is evaluated as its base model with the
adapter loaded on the engine, no merge. The slow test checks the rollouts' log-probs against the
PEFT model's (so the adapter, not the base, was sampled)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.evaluation.report import resolve_models
from scalerl.rollout.lora import write_adapter
from scalerl.rollout.lora_adapters import checkpoint_adapter


def lora_checkpoint(root: Path, model_path: str, step: int = 1, seed: int = 1):
    """A LoRA run's checkpoint folder `root/checkpoints/step-00000N/adapter/` (random B); the
    PEFT model it holds."""
    from lora_models import SERVING, adapter_state, peft_adapter

    model = peft_adapter(model_path, seed)
    write_adapter(adapter_state(model).items(), SERVING, model_path,
                  root / "checkpoints" / f"step-{step:06d}" / "adapter")
    return model


def test_a_lora_checkpoint_is_found_and_read(tmp_path, tiny_model_path):
    lora_checkpoint(tmp_path, tiny_model_path, step=3)
    step = tmp_path / "checkpoints" / "step-000003"
    base, serving, folder = checkpoint_adapter(step)
    assert (base, serving.rank, serving.alpha, folder) == (tiny_model_path, 4, 8.0,
                                                           step / "adapter")
    assert checkpoint_adapter(tmp_path) is None
    refs = resolve_models([str(tmp_path)]) + resolve_models([str(step)])
    assert [(r.path, r.step) for r in refs] == [(str(step), 3)] * 2
    config = json.loads((folder / "adapter_config.json").read_text())
    del config["r"]
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no 'r'"):
        checkpoint_adapter(step)


@pytest.mark.slow
def test_eval_of_a_lora_run_dir_samples_base_plus_adapter(tmp_path, tiny_model_path):
    from types import SimpleNamespace

    from lora_models import mismatch

    model = lora_checkpoint(tmp_path, tiny_model_path)
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "scalerl", "eval", "--model", str(tmp_path), "--tasks",
           "arith", "--limit", "4", "--n", "2", "--k", "1,2", "--thinking-budget", "16",
           "--answer-budget", "16", "--out", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (entry,) = json.loads(proc.stdout.strip().splitlines()[-1])["models"]
    assert entry["step"] == 1 and entry["generated_samples"] == 4
    (rows_file,) = out.glob("cache/*/*/arith.jsonl")
    temperature = json.loads((rows_file.parent / "settings.json").read_text())["temperature"]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(rows) == 8 and {v for r in rows for v in r["versions"]} == {1}
    rollouts = [SimpleNamespace(prompt_token_ids=tuple(r["prompt_token_ids"]),
                                token_ids=tuple(r["token_ids"]), logprobs=r["logprobs"],
                                versions=r["versions"]) for r in rows]
    kl, worst, count = mismatch(rollouts, {1: model}, temperature)
    print(f"\neval of a LoRA checkpoint: mismatch KL vs its PEFT model {kl:.3e} over {count}")
    assert count > 20 and kl <= 1e-8 and worst <= 1e-3
