"""`scalerl train --dry-run`: the model built on `meta` from a published config.json alone (no
weights), placed and sized as the run would be; the ScaleRL recipe fits 8 x 80 GB with micro-
batches by tokens, split between trainer ranks and engines as the throughput model predicts
fastest (its trainer idle under 0.3; a larger KV cache on 141 GB), and the old
`micro_batch_size: 8` at 16k tokens per row is refused in one line, in well under 10 s of CPU.
The memory model itself is checked by hand on a small shape."""

from __future__ import annotations

import json
import os
import re
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

from scalerl.config import ConfigError, load_config
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
    # the split the throughput model predicts fastest among those within 0.9 x 80 GiB (the
    # 10% margin): 4 FSDP2 ranks, 4 TP-1 engines (3:5's ranks need 79.9 GiB)
    assert plan["placement"] == {"train": ["0", "1", "2", "3"], "generate": ["4", "5", "6", "7"],
                                 "engines": [["4"], ["5"], ["6"], ["7"]]}
    assert plan["ranks"] == 4 and plan["layout"]["micro_tokens"] == 16384
    assert plan["margin"] == 0.1 and plan["trainer_gib"] <= 0.9 * 80
    assert plan["engine_gib"] <= 0.9 * 80
    # the state is 16 bytes per parameter over 4 ranks
    state = sum(plan["trainer"][k] for k in ("weights", "gradients", "optimizer"))
    assert state == pytest.approx(16 * QWEN3_8B_PARAMS / 4, rel=1e-6)
    assert plan["publish_bytes"] == 2 * QWEN3_8B_PARAMS  # bf16
    # the parts a first count missed, each by its formula (scalerl/planning/sizing.py)
    t, vh = plan["trainer"], 151936 * 4096
    assert t["rmsnorm_fp32"] == 16384 * 4 * (2 * 4096 + (32 + 8) * 128 + 4096)  # Qwen3 q/k
    assert t["head_copies"] == vh * 2  # head_operands bfloat16: the head's bf16 weight
    assert t["head_fallback"] == vh * 4  # addmm(out_dtype=float32) refused: an fp32 temporary
    assert t["reduce_scatter"] == int(2 * vh * 4 * (1 + 1 / 4))  # the fp32 root's buffers
    assert t["publish_staging"] == vh * (4 + 2)  # files: the embedding in fp32, then bf16
    assert t["fragmentation"] == int(0.05 * (sum(t.values()) - t["fragmentation"]
                                             - t["runtime"]))
    # the KV cache fills the engine GPU: 0.9 x 80 GiB less the weights and 3 GiB of runtime,
    # at 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes = 144 KiB per token
    kv = 0.9 * 80 * GIB - 2 * QWEN3_8B_PARAMS - 3 * GIB
    assert plan["engine"]["kv_cache"] == int(kv)
    assert plan["kv_sequences"] == pytest.approx(int(kv) / GIB * GIB / 147456 / 16384)
    assert plan["rollouts_per_step"] == 48 * 16 and plan["in_flight"] == 48 * 16 * 9
    speed = plan["speed"]
    assert speed["gpu"] == "H100-SXM" and speed["engine"]["engines"] == 4
    # the running sequences' context: 512 + 7,168 x (4/3) / 2 = 5,290 tokens
    assert speed["engine"]["max_num_seqs"] == int(kv) // 147456 // 5290 == 73
    p = speed["plan"]
    assert p["decode"]["sequences"] == 73 and p["concurrency"] == 4 * 73
    # validation: 500 prompts x 8 x 2 tasks every 100 steps on the training engines;
    # checkpoints: 12 bytes x 8.19B at 2 GB/s every 100 steps or every 3,600 s (the recipe's
    # checkpoint.every_s), whichever comes sooner: here the hour, a step taking minutes
    assert p["validation_s"] == pytest.approx(8000 * 7168 / p["decode_tokens_per_s"] / 100)
    before = max(p["generate_s"], p["train_s"]) + p["publish_s"] + p["validation_s"]
    assert before / 3600 > 1 / 100
    assert p["checkpoint_s"] == pytest.approx(12 * QWEN3_8B_PARAMS / 2e9 * before / 3600)
    assert p["step_s"] == pytest.approx(max(p["generate_s"], p["train_s"]) + p["publish_s"]
                                        + p["validation_s"] + p["checkpoint_s"])
    assert p["step_range"][0] < p["step_s"] < p["step_range"][1]
    assert p["rollouts_per_hour"] == pytest.approx(768 * 3600 / p["step_s"])
    assert p["wall_s"] == pytest.approx(7400 * p["step_s"])
    assert [(c["layout"]["ranks"], c["fits"]) for c in speed["layouts"]] == [
        (1, False), (2, False), (3, False), (4, True), (5, True), (6, True), (7, True)]
    # the memory left, 0.9 x 80 GiB less the rank's peak, at 1024 x 565,248 bytes per 1,024
    # tokens (activations 36 x 4096 x 2 + 83,968 x 2, the head's inputs 4096 x 8, the norms'
    # fp32 copies 17,408 x 4) and 5% of fragmentation: 5 x 1,024 more tokens per micro-batch
    extra = (int(0.9 * 80 * GIB) - sum(t.values())) // (1024 * 565248 * 1.05)
    assert plan["micro_fit"] == 16384 + 1024 * int(extra) == 21504
    assert speed["launch"] == ("torchrun --nproc_per_node 4 -m scalerl train --config scalerl "
                               "--set offpolicy.micro_batch_tokens=21504")
    assert cpu < 10, f"{cpu:.1f} s of CPU"
    # an H200's 141 GB: a larger KV cache per engine than the H100's 80
    # an H200 by name: the 143,771 MiB it reports, a larger KV cache per engine
    code, out, err, _ = dry_run(write_config(tmp_path, QWEN3_8B), "--json", "--gpus", "8",
                                "--gpu", "H200-SXM")
    big = json.loads(out)
    assert code == 0, err
    assert big["gpu_bytes"] == int(143771 / 1024 * GIB)
    assert big["speed"]["gpu"] == "H200-SXM" and big["speed"]["engine"]["kv_cache_gib"] == \
        pytest.approx((int(0.9 * big["gpu_bytes"]) - 2 * QWEN3_8B_PARAMS - 3 * GIB) / GIB)
    assert big["speed"]["engine"]["kv_cache_gib"] > speed["engine"]["kv_cache_gib"] + 50
    assert big["micro_fit"] > 16384  # the memory left takes larger micro-batches


def test_the_printed_plan_and_its_warning_for_rollouts_queued_past_the_engines(tmp_path):
    code, out, err, _ = dry_run(write_config(tmp_path, QWEN3_8B), "--gpus", "8", "--gpu-gib",
                                "80", "--completion-tokens", "4000")
    assert code == 0, err
    assert "throughput on H100-SXM" in out and "mean prompt 512 + completion 4000 tokens" in out
    # the running sequences' context, 512 + 4,000 x (4/3) / 2 = 3,178 tokens: 391,348 // 3,178 =
    # 123 sequences per engine, and 4:4, the split the margin leaves
    assert "engines: 4 x TP 1, KV cache 53.7 GiB per GPU, max_num_seqs 123" in out
    assert "  * 4:4  trainer rank" in out and "1:7  trainer rank" in out
    assert "memory margin: plan.memory_margin 0.1 -> 72.0 of 80.0 GiB per GPU planned" in out
    assert "decode context 3178 tokens" in out and "s: every uncertain constant" in out
    assert "rollouts per hour; 7400 steps in" in out and "days" in out
    # the default, the whole lag window (48 x 16 x (8 + 1) = 6,912), against what 4 engines
    # decode
    assert "warning: 6912 rollouts in flight but the engines decode" in out
    assert "launch: torchrun --nproc_per_node" in out
    code, _, err, _ = dry_run(write_config(tmp_path, QWEN3_8B), "--gpus", "8", "--gpu-gib",
                              "80", "--gpu", "B300")
    assert code == 2 and "--gpu 'B300': known GPUs are A100-40GB" in err


QWEN3_32B = {**QWEN3_8B, "hidden_size": 5120, "intermediate_size": 25600,
             "num_hidden_layers": 64, "num_attention_heads": 64, "max_window_layers": 64}
"""Qwen/Qwen3-32B's config.json: the 8B's with these widths and depth."""


def test_qwen3_32b_on_one_node_of_80gb_is_refused_saying_what_it_needs(tmp_path):
    code, out, err, _ = dry_run(write_config(tmp_path, QWEN3_32B), "--gpus", "8",
                                "--gpu-gib", "80")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "32.762B parameters" in out
    # 16 bytes x 32.76B parameters = 488 GiB of state: a share of it and the step's working set
    # fit 0.9 x 80 = 72 GiB from 25 ranks on; with one TP-1 engine (61.0 GiB of bf16
    # weights), 26 GPUs
    assert ("the state alone does not fit: it needs 25 FSDP2 trainer ranks" in lines[0]
            and "engines of TP 1 (bf16 weights 61.0 GiB), at least 4 nodes of 8 GPUs"
            in lines[0] and "CPU offload of the optimizer state is not supported" in lines[0])
    # no margin: the whole 80 GiB, from 18 ranks on (17 before the head's fallback temporary,
    # 151,936 x 5,120 x 4 bytes = 2.9 GiB, was counted), 19 GPUs
    code, _, err, _ = dry_run(write_config(tmp_path, QWEN3_32B), "--gpus", "8", "--gpu-gib",
                              "80", "--set", "plan.memory_margin=0")
    assert code == 2 and "it needs 18 FSDP2 trainer ranks" in err and "3 nodes" in err


def test_eight_padded_rows_of_16k_tokens_per_micro_batch_are_refused_in_one_line(tmp_path):
    code, out, err, _ = dry_run(write_config(tmp_path, QWEN3_8B), "--set",
                                "offpolicy.micro_batch_tokens=null", "--set",
                                "offpolicy.micro_batch_size=8", "--gpus", "8", "--gpu-gib", "80")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "does not fit: a trainer rank needs" in lines[0]
    assert "over 72.0 GiB of the GPUs' 80.0 (plan.memory_margin 0.1)" in lines[0]
    assert "offpolicy.micro_batch_tokens" in lines[0]
    assert "8 rows padded to 16384" in out and "activations" in out


def test_qwen25_1_5b_on_one_shared_gpu_is_sized_with_its_tied_head(tmp_path):
    path = write_config(tmp_path, QWEN25_1_5B)
    code, out, err, _ = dry_run(path, "--json", "--gpus", "1", "--gpu-gib", "80", "--set",
                                "engine.kv_cache_gib=70")
    plan = json.loads(out)
    assert plan["shape"]["params"] == QWEN25_1_5B_PARAMS and plan["shape"]["tied"]
    assert plan["placement"]["train"] == ["0"] and plan["placement"]["generate"] == ["0"]
    assert code == 2 and "a trainer rank and the engine need" in err  # 70 GiB of KV on top
    code, out, err, _ = dry_run(path, "--json", "--gpus", "1", "--gpu-gib", "80")
    plan = json.loads(out)
    assert code == 0, err
    # the KV cache takes what the shared GPU leaves: 0.9 x 80 GiB less the trainer rank's peak,
    # the bf16 weights and the engine's runtime; 2 (K, V) x 28 layers x 2 KV heads x 128 x 2
    # bytes per token
    kv = int(0.9 * 80 * GIB - plan["trainer_gib"] * GIB - 2 * QWEN25_1_5B_PARAMS - 3 * GIB)
    assert plan["engine"]["kv_cache"] == pytest.approx(kv, abs=1)
    assert plan["kv_sequences"] == pytest.approx(kv / 28672 / 16384, rel=1e-6)
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
    # what the first count missed: the norms' fp32 copies, 4 bytes x (2 norms x 8 wide in the
    # recomputed layer + the final norm's 8) per token; no head copy (fp32 operands of an fp32
    # master); FSDP2's fp32 reduce-scatter buffers, the larger of the root's 160 x 4 x (1 + 1/2)
    # = 960 and a layer's 420 x (2 bf16 + 4 x 1.5) = 3360; the publish staged through the host:
    # the largest tensor (10 x 8) gathered in fp32 and cast to bf16, 80 x (4 + 2) = 480
    assert parts["rmsnorm_fp32"] == 100 * 4 * (16 + 8) == 9600
    assert parts["head_copies"] == 0 and parts["reduce_scatter"] == 3360
    assert parts["publish_staging"] == 480
    # 5% of the rest: 2000 + 2000 + 4000 + 2960 + 30400 + 6880 + 9600 + 3360 + 480 = 61680
    assert parts["fragmentation"] == 3084
    qwen3 = ModelShape(**{**shape.__dict__, "qk_norm": True})
    nccl = trainer_memory(qwen3, TrainerLayout(**{**layout.__dict__, "transfer": "nccl",
                                                  "head_operands": "bfloat16"}))
    assert nccl["rmsnorm_fp32"] == 100 * 4 * (16 + 3 * 4 + 8)  # q (2 heads) and k (1) norms
    assert nccl["head_copies"] == 10 * 8 * 2  # the bf16 operand copy of the fp32 head
    assert nccl["publish_staging"] == 80 * 4 + 1000 * 2  # every weight staged in bf16 on GPU
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


def test_the_planned_rollouts_in_flight_are_the_pipelines_cap_in_whole_prompts():
    from scalerl.config import load_config
    from scalerl.planning.dry_run import planned_in_flight

    def planned(*sets: str) -> int:
        return planned_in_flight(load_config("scalerl", list(sets)))

    assert planned() == 48 * 16 * 9  # the lag window (prompts x n x (max_lag + 1))
    assert planned("offpolicy.max_in_flight=950") == 60 * 16  # ceil(950 / 16) prompts
    assert planned("offpolicy.max_in_flight=10000") == 48 * 16 * 9  # never past the window
    assert planned("offpolicy.mode=ppo", "offpolicy.k=2") == 48 * 16 * 2  # k batches


def test_a_launch_far_slower_than_the_best_split_is_refused_naming_it(tmp_path):
    path = write_config(tmp_path, QWEN3_8B)
    # torchrun --nproc_per_node 7 on 8 H100s: 7 trainer ranks, 1 engine; its step is ~4x 4:4's
    launch = {"LOCAL_WORLD_SIZE": "7", "WORLD_SIZE": "7", "RANK": "0"}
    code, out, err, _ = dry_run(path, "--gpus", "8", "--gpu", "H100-SXM", env=launch)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "refused: 7 trainer ranks : 1 engine(s) is predicted" in line
    assert "slower per step than 4:4" in line and "over plan.max_slowdown 3" in line
    assert ("launch `torchrun --nproc_per_node 4 -m scalerl train --config scalerl`" in line
            and "--set plan.max_slowdown=null" in line)
    assert "  * 4:4" not in out and "7:1  trainer rank" in out  # every split is still shown
    # the override, and a factor the split passes
    for override in ("plan.max_slowdown=null", "plan.max_slowdown=5"):
        code, _, err, _ = dry_run(path, "--gpus", "8", "--gpu", "H100-SXM", "--set", override,
                                  env=launch)
        assert code == 0, err
    # the documented worst launch, a trainer rank on all 8 GPUs and the engine beside one:
    # no KV cache left, and the fastest split named
    code, _, err, _ = dry_run(path, "--gpus", "8", "--gpu", "H100-SXM", "--ranks", "8")
    assert code == 2 and "not one 16384-token sequence" in err
    assert "the fastest split that fits is 4:4: launch `torchrun --nproc_per_node 4" in err


def test_the_completion_lengths_spread_sets_the_running_context(tmp_path):
    path = write_config(tmp_path, QWEN3_8B)
    # sqrt(E[L^2]) = 8,000 over a 7,168 mean: 512 + 8000^2 / (2 x 7168) = 4,976 tokens, and the
    # 389,038 tokens of KV an H100 engine holds give 78 sequences
    code, out, err, _ = dry_run(path, "--gpus", "8", "--gpu", "H100-SXM", "--completion-rms",
                                "8000")
    assert code == 0, err
    assert "decode context 4976 tokens" in out and "max_num_seqs 78" in out
    code, _, err, _ = dry_run(path, "--gpus", "8", "--gpu", "H100-SXM", "--completion-rms",
                              "5000")  # below the mean: E[L^2] < E[L]^2
    assert code == 2 and "E[L^2] >= E[L]^2" in err


@pytest.mark.parametrize(("setting", "message"), [
    ("plan.memory_margin=0.5", "plan.memory_margin = 0.5: must be in [0, 0.5)"),
    ("plan.memory_margin=-0.1", "plan.memory_margin = -0.1: must be in [0, 0.5)"),
    ("plan.max_slowdown=0.5", "plan.max_slowdown = 0.5: must be >= 1, or null"),
])
def test_the_plan_settings_are_checked_in_one_line(setting, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("scalerl", [setting])
