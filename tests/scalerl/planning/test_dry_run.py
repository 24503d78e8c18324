"""`scalerl train --dry-run`: the model built on `meta` from a published config.json alone (no
weights), placed and sized as the run would be; the ScaleRL recipe fits 8 x 80 GB with micro-
batches by tokens, and the old `micro_batch_size: 8` at 16k tokens per row is refused in one
line, in well under 10 s of CPU. The memory model itself is checked by hand on a small shape."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from published_configs import (
    QWEN3_8B,
    QWEN3_8B_PARAMS,
    QWEN25_1_5B,
    QWEN25_1_5B_PARAMS,
    write_config,
)

from scalerl.planning.sizing import (
    ModelShape,
    TrainerLayout,
    engine_memory,
    kv_bytes_per_token,
    trainer_memory,
)

GIB = 2**30


def dry_run(model_dir: str, *args: str, env: dict | None = None):
    """The command in a fresh process: (exit code, stdout, stderr, its CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "scalerl", "train", "--config", "scalerl",
                           "--set", f"policy.model={model_dir}", "--dry-run", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stdout, proc.stderr, cpu


def test_the_scalerl_recipe_for_qwen3_8b_fits_eight_80gb_gpus(tmp_path):
    # LOCAL_WORLD_SIZE=1 without a launcher's RANK: what vLLM's CPU platform leaves in a process
    # that started an engine (this suite's own), which once made the dry run size one rank.
    code, out, err, cpu = dry_run(write_config(tmp_path, QWEN3_8B), "--json", "--gpus", "8",
                                  "--gpu-gib", "80", env={"LOCAL_WORLD_SIZE": "1"})
    assert code == 0, err
    plan = json.loads(out)
    assert plan["shape"]["params"] == QWEN3_8B_PARAMS and plan["fits"] and not plan["refusal"]
    assert plan["placement"] == {"train": [str(i) for i in range(7)], "generate": ["7"]}
    assert plan["ranks"] == 7 and plan["layout"]["micro_tokens"] == 32768
    assert plan["trainer_gib"] < 80 and plan["engine_gib"] <= 0.85 * 80
    # the state is 16 bytes per parameter over 7 ranks
    state = sum(plan["trainer"][k] for k in ("weights", "gradients", "optimizer"))
    assert state == pytest.approx(16 * QWEN3_8B_PARAMS / 7, rel=1e-6)
    assert plan["publish_bytes"] == 2 * QWEN3_8B_PARAMS  # bf16
    # 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes = 144 KiB per token; 40 GiB of it
    assert plan["kv_sequences"] == pytest.approx(40 * GIB / 147456 / 16384)
    assert plan["rollouts_per_step"] == 48 * 16 and plan["in_flight"] == 48 * 16 * 9
    assert cpu < 10, f"{cpu:.1f} s of CPU"


def test_eight_padded_rows_of_16k_tokens_per_micro_batch_are_refused_in_one_line(tmp_path):
    code, out, err, _ = dry_run(write_config(tmp_path, QWEN3_8B), "--set",
                                "offpolicy.micro_batch_tokens=null", "--set",
                                "offpolicy.micro_batch_size=8", "--gpus", "8", "--gpu-gib", "80")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "does not fit: a trainer rank needs" in lines[0]
    assert "the GPUs have 80.0 GiB" in lines[0] and "offpolicy.micro_batch_tokens" in lines[0]
    assert "8 rows padded to 16384" in out and "activations" in out


def test_qwen25_1_5b_on_one_shared_gpu_is_sized_with_its_tied_head(tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    code, out, err, _ = dry_run(path, "--json", "--gpus", "1", "--gpu-gib", "80")
    plan = json.loads(out)
    assert plan["shape"]["params"] == QWEN25_1_5B_PARAMS and plan["shape"]["tied"]
    assert plan["placement"] == {"train": ["0"], "generate": ["0"]}  # shared
    assert code == 2 and "a trainer rank and the engine need" in err  # 40 GiB of KV on top
    code, out, err, _ = dry_run(path, "--json", "--gpus", "1", "--gpu-gib", "80", "--set",
                                "engine.kv_cache_gib=8")
    plan = json.loads(out)
    assert code == 0, err
    # 2 (K, V) x 28 layers x 2 KV heads x 128 x 2 bytes per token
    assert plan["kv_sequences"] == pytest.approx(8 * GIB / 28672 / 16384)
    assert plan["trainer"]["weights"] == 4 * QWEN25_1_5B_PARAMS  # fp32, one rank


def test_under_a_launcher_the_ranks_are_its_own_and_only_rank_0_prints(tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    launch = {"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8", "RANK": "0"}
    code, out, err, _ = dry_run(path, "--json", "--gpus", "8", "--gpu-gib", "80", env=launch)
    plan = json.loads(out)
    assert code == 0, err
    assert plan["ranks"] == 8 and plan["layout"]["ranks"] == 8  # sharded over both nodes
    assert plan["placement"]["train"] == ["0", "1", "2", "3"]
    code, out, err, _ = dry_run(path, "--gpus", "8", "--gpu-gib", "80",
                                env={**launch, "RANK": "5"})
    assert (code, out, err) == (0, "", "")


def test_the_memory_model_by_hand():
    shape = ModelShape(params=1000, layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1,
                       head_dim=4, vocab=10, tied=False)  # root: 2 x 10 x 8 = 160 parameters
    layout = TrainerLayout(ranks=2, sharded=True, dtype="auto", fp32_head=True,
                           checkpointing=True, micro_tokens=100, logit_chunk_tokens=4)
    parts = trainer_memory(shape, layout)
    assert parts["weights"] == parts["gradients"] == 4 * 1000 // 2
    assert parts["optimizer"] == 8 * 1000 // 2
    # two layers of (1000 - 160) / 2 = 420 parameters in bf16, and the fp32 root twice
    assert parts["gathered"] == 2 * 2 * 420 + 2 * 4 * 160
    # per token: 2 layer inputs of 8 in bf16, then one layer's working set:
    # (6 x 8 + 2 x 2 x 4 + 2 x 1 x 4 + 4 x 16) x 2 bytes = 136 x 2
    assert parts["activations"] == 100 * (2 * 8 * 2 + 136 * 2)
    assert parts["logits"] == 3 * 4 * 10 * 4 + 100 * 8 * (4 + 4)
    assert parts["runtime"] == 2 * GIB and "attention_mask" not in parts
    padded = trainer_memory(shape, TrainerLayout(**{**layout.__dict__, "padded_rows": 4}))
    assert padded["attention_mask"] == 4 * 25 * 25  # (B, 1, L, L) booleans
    assert kv_bytes_per_token(shape, "bfloat16") == 2 * 2 * 1 * 4 * 2
    assert engine_memory(shape, dtype="bfloat16", kv_gib=1.0, tp=2) == {
        "weights": 1000, "kv_cache": GIB, "runtime": 3 * GIB}


def test_a_model_whose_config_cannot_be_found_is_one_line_naming_it(tmp_path):
    code, out, err, _ = dry_run("nobody/no-such-model", "--gpus", "8", "--gpu-gib", "80",
                                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "policy.model = 'nobody/no-such-model'" in lines[0]
