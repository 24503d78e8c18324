"""The throughput model against arithmetic done by hand: a decode step reads the weights once
and every sequence's KV at `MBU` of the bandwidth (never faster than its FLOPs at peak), the
trainer does 6N + 12 L H Q T FLOPs per token at `TRAINER_MFU`, PipelineRL's step is the longer
of generating and training (PPO's their sum), plus the publish's serial work, validation and
checkpoints; running sequences are length-biased; the error bars are the step at the constants'
ends; the warnings fire where stated. The worked example of docs/gpu.md (Qwen3-8B, the scalerl
recipe, 4 trainer ranks and 4 engines on 8 x H100-SXM) is checked figure by figure."""

from __future__ import annotations

import pytest
from published_configs import QWEN3_8B_PARAMS

from scalerl.planning.placement import Layout
from scalerl.planning.sizing import ModelShape
from scalerl.planning.throughput import (
    MBU,
    TRAINER_MFU,
    Gpu,
    Workload,
    compute_params,
    decode,
    gpu_for,
    gpu_named,
    max_num_seqs_for,
    throughput,
    trainer_flops_per_token,
    trainer_tokens_per_s,
    warnings,
)

GIB = 2**30
SMALL = ModelShape(params=1000, layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1,
                   head_dim=4, vocab=10, tied=False)  # input embedding 10 x 8 = 80 parameters
TOY = Gpu("toy", memory_gb=1, bandwidth=1e6, bf16_flops=1e9, link_bandwidth=1e3,
          host_bandwidth=1e2, source="a test")
QUICK_LINKS = Gpu("quick links", memory_gb=1, bandwidth=1e6, bf16_flops=1e9,
                  link_bandwidth=1e12, host_bandwidth=1e12, source="a test")
QWEN3_8B = ModelShape(params=QWEN3_8B_PARAMS, layers=36, hidden=4096, intermediate=12288,
                      heads=32, kv_heads=8, head_dim=128, vocab=151936, tied=False)


def test_a_decode_step_reads_the_weights_once_and_each_sequences_kv():
    assert compute_params(SMALL) == 1000 - 80
    # KV per token: 2 (K, V) x 2 layers x 1 KV head x 4 x 2 bytes = 32; 3,200 bytes: 100 tokens
    step = decode(SMALL, TOY, tp=1, dtype="bfloat16", kv_bytes=3200, context=10, max_num_seqs=8)
    assert step.kv_tokens == 100 and step.sequences == 8  # max_num_seqs binds (KV holds 10)
    read = 920 * 2 + 8 * 10 * 32  # weights in bf16 + 8 sequences x 10 tokens of KV
    assert step.step_s == pytest.approx(read / (1e6 * 0.6)) and step.bound == "memory"
    assert step.tokens_per_s == pytest.approx(8 / (4400 / 6e5))
    held = decode(SMALL, TOY, tp=1, dtype="bfloat16", kv_bytes=3200, context=25,
                  max_num_seqs=8)
    assert held.sequences == 4  # the KV holds 100 // 25 sequences


def test_a_decode_step_is_never_faster_than_its_flops_at_peak():
    fast = Gpu("fast", 1, bandwidth=1e15, bf16_flops=1e9, link_bandwidth=1.0,
               host_bandwidth=1.0, source="a test")
    step = decode(SMALL, fast, tp=1, dtype="bfloat16", kv_bytes=3200, context=10,
                  max_num_seqs=8)
    # per token 2 x 920 + 4 x 2 layers x (2 heads x 4) x 10 context = 2,480 FLOPs
    assert step.bound == "compute" and step.step_s == pytest.approx(8 * 2480 / 1e9)


def test_a_kv_cache_that_holds_no_sequence_is_one_line():
    with pytest.raises(ValueError, match="does not hold one sequence at the mean context"):
        decode(SMALL, TOY, tp=1, dtype="bfloat16", kv_bytes=320, context=11, max_num_seqs=8)


def test_trainer_flops_per_token_are_6n_plus_the_attention_term():
    assert trainer_flops_per_token(SMALL, 100) == 6 * 920 + 12 * 2 * (2 * 4) * 100
    assert trainer_tokens_per_s(SMALL, TOY, 2, 100) == pytest.approx(
        2 * 1e9 * 0.25 / 24720)


def test_max_num_seqs_follows_the_kv_capacity_at_the_context():
    assert max_num_seqs_for(391348, 4096) == 95  # 95 x 4096 = 389,120 tokens
    assert max_num_seqs_for(10**7, 100) == 512  # vLLM's CUDA-graph ceiling
    assert max_num_seqs_for(5, 100) == 1


def test_pipelinerl_overlaps_and_ppo_takes_turns():
    # every completion 16 tokens long (E[L^2] = 256): the context is p + L/2
    work = Workload(rollouts_per_step=10, prompt_tokens=2, completion_tokens=16, steps=100,
                    overlap=True, completion_sq_mean=256)
    assert work.context == 2 + 8 and work.sequence == 18 and work.attention_sequence == 18
    lay = Layout(ranks=2, engines=3, tp=1)
    kw = {"dtype": "bfloat16", "kv_bytes": 3200, "max_num_seqs": 8}
    piped = throughput(SMALL, TOY, lay, work, **kw)
    one = 8 / ((920 * 2 + 8 * 10 * 32) / 6e5)  # tokens/s of one engine (10-token context)
    generate = 10 * 16 / (3 * one)
    train = 10 * 18 / (2 * 1e9 * 0.25 / (6 * 920 + 12 * 2 * 8 * 18))
    # files, nominal: the fp32 gather over 1e3 B/s links at 0.87, the bf16 copy to the host at
    # 0.4 of 100 B/s, the write at 3 GB/s, the reload at 4 GB/s and 1 s of pause and resume
    publish = 4000 / 870 + 2000 / 40 + 2000 / 3e9 + 2000 / 4e9 + 1.0
    assert piped.generate_s == pytest.approx(generate) and piped.train_s == pytest.approx(train)
    assert piped.publish_s == pytest.approx(publish)
    assert piped.step_s == pytest.approx(max(generate, train) + publish)
    assert piped.trainer_idle == pytest.approx(1 - train / piped.step_s)
    assert piped.rollouts_per_hour == pytest.approx(10 * 3600 / piped.step_s)
    assert piped.wall_s == pytest.approx(100 * piped.step_s) and piped.concurrency == 3 * 8
    turns = throughput(SMALL, TOY, lay, Workload(10, 2, 16, 100, overlap=False,
                                                 steps_per_publish=4, completion_sq_mean=256),
                       **kw, transfer="nccl")
    # nccl: the gather, the bf16 broadcast over the links, the engines' pause: per 4 steps
    assert turns.step_s == pytest.approx(generate + train + (4000 / 870 + 2000 / 870 + 1) / 4)


def test_running_sequences_are_length_biased():
    # half the completions 8 tokens, half 24: E[L] 16, E[L^2] (64 + 576) / 2 = 320; a running
    # sequence's mean context is p + E[L^2] / (2 E[L]) = 2 + 10, not p + E[L] / 2 = 10
    work = Workload(10, 2, 16, 1, overlap=True, completion_sq_mean=320)
    assert work.context == 12
    # a trained token's row, token-weighted: (10^2 + 26^2) / (10 + 26) = 776 / 36
    assert work.attention_sequence == pytest.approx(776 / 36)
    # the default spread: lengths even over [0, 2 x 16], E[L^2] = 16^2 x 4/3
    assert Workload(10, 2, 16, 1, overlap=True).length_sq == pytest.approx(256 * 4 / 3)
    assert Workload(10, 2, 16, 1, overlap=True).context == int(2 + 256 * 4 / 3 / 32)  # 12
    with pytest.raises(ValueError, match="E\\[L\\^2\\] >= E\\[L\\]\\^2"):
        Workload(10, 2, 16, 1, overlap=True, completion_sq_mean=255)


def test_validation_and_checkpoints_are_amortised_per_step():
    base = dict(rollouts_per_step=10, prompt_tokens=2, completion_tokens=16, steps=1,
                overlap=True, completion_sq_mean=256, sharded=False)
    kw = {"dtype": "bfloat16", "kv_bytes": 3200, "max_num_seqs": 8, "transfer": "nccl"}
    lay = Layout(ranks=2, engines=3, tp=1)
    plain = throughput(SMALL, TOY, lay, Workload(**base), **kw)
    engines = 3 * 8 / ((920 * 2 + 8 * 10 * 32) / 6e5)
    # 40 validation rollouts of 16 tokens every 5 steps on the training engines
    val = throughput(SMALL, TOY, lay, Workload(**base, val_rollouts=40, val_every=5), **kw)
    assert val.validation_s == pytest.approx(40 * 16 / engines / 5)
    assert val.step_s == pytest.approx(plain.step_s + val.validation_s)
    # a checkpoint (12 bytes x 1000 parameters at 2 GB/s) every 10 steps
    ckpt = throughput(SMALL, TOY, lay, Workload(**base, checkpoint_every=10), **kw)
    assert ckpt.checkpoint_s == pytest.approx(12_000 / 2e9 / 10)
    # every_s sooner than every: one per every_s seconds of steps
    timed = throughput(SMALL, TOY, lay, Workload(**base, checkpoint_every=10,
                                                 checkpoint_every_s=plain.step_s / 2), **kw)
    assert timed.checkpoint_s == pytest.approx(12_000 / 2e9 * 2)


def test_the_error_bars_are_the_constants_at_their_ends():
    work = Workload(10, 2, 16, 1, overlap=False, completion_sq_mean=256, sharded=False)
    plan = throughput(SMALL, TOY, Layout(2, 3, 1), work, dtype="bfloat16", kv_bytes=3200,
                      max_num_seqs=8, transfer="nccl")
    low, high = plan.step_range
    read = 920 * 2 + 8 * 10 * 32
    flops = 6 * 920 + 12 * 2 * 8 * 18
    # PPO: generate + train + the nccl publish (broadcast at the gather share, pause)
    fast = (160 / (3 * 8 / (read / (1e6 * 0.75))) + 180 / (2 * 1e9 * 0.29 / flops)
            + 2000 / (1e3 * 0.87) + 0.5)
    slow = (160 / (3 * 8 / (read / (1e6 * 0.5))) + 180 / (2 * 1e9 * 0.20 / flops)
            + 2000 / (1e3 * 0.5) + 3.0)
    assert low == pytest.approx(fast) and high == pytest.approx(slow)
    assert low < plan.step_s < high


def test_the_worked_example_qwen3_8b_on_eight_h100s():
    h100 = gpu_named("H100-SXM")
    work = Workload(rollouts_per_step=48 * 16, prompt_tokens=512, completion_tokens=7168,
                    steps=7400, overlap=True)
    # what the engine GPU leaves: 0.9 of the 81,559 MiB an H100 reports
    kv = int(0.9 * 81559 * 2**20) - 2 * QWEN3_8B_PARAMS - 3 * GIB
    assert h100.cuda_gib == pytest.approx(79.65, abs=0.01)
    plan = throughput(QWEN3_8B, h100, Layout(ranks=4, engines=4, tp=1), work, dtype="bfloat16",
                      kv_bytes=kv, max_num_seqs=73)
    n = QWEN3_8B_PARAMS - 151936 * 4096  # 7,568,405,504 without the input embedding
    assert compute_params(QWEN3_8B) == n == 7_568_405_504
    assert kv == 57_366_032_793  # 53.4 GiB
    assert plan.decode.kv_tokens == kv // 147456 == 389_038  # 144 KiB of KV per token
    # the running sequences' context: 512 + 7168 x (4/3) / 2 = 5,290 tokens; 73 of them
    assert work.context == 5290 and 389_038 // 5290 == 73
    read = 2 * n + 73 * 5290 * 147456
    assert plan.decode.step_s == pytest.approx(read / (3.35e12 * MBU))
    assert plan.decode.tokens_per_s == pytest.approx(2035.66, abs=0.01)
    # a trained token's row, token-weighted: (512^2 + 2 x 512 x 7168 + 7168^2 x 4/3) / 7680
    assert work.attention_sequence == pytest.approx(9910.04, abs=0.01)
    per_token = 6 * n + 12 * 36 * 4096 * 9910.044444
    assert plan.trainer_tokens_per_s == pytest.approx(4 * 989e12 * TRAINER_MFU / per_token)
    assert plan.trainer_tokens_per_s == pytest.approx(15712, abs=1)
    assert plan.generate_s == pytest.approx(768 * 7168 / (4 * 2035.66), rel=1e-5)  # ~676 s
    assert plan.train_s == pytest.approx(768 * 7680 / 15711.9, rel=1e-5)  # ~375 s
    # gather 0.08 + copy to host 0.64 + write 5.46 + reload 4.10 + pause 1 = 11.28 s
    assert plan.publish_s == pytest.approx(11.2794, abs=1e-3)
    assert plan.step_s == pytest.approx(plan.generate_s + plan.publish_s)  # the engines bind
    assert plan.trainer_idle == pytest.approx(1 - plan.train_s / plan.step_s)
    assert plan.rollouts_per_hour == pytest.approx(768 * 3600 / plan.step_s)
    assert plan.wall_s / 86400 == pytest.approx(7400 * plan.step_s / 86400)


def test_warnings_for_rollouts_queued_far_past_the_engines_and_an_idle_trainer():
    # a publish every 10^6 steps: its second of pause is nothing per step here
    work = Workload(rollouts_per_step=10, prompt_tokens=2, completion_tokens=16, steps=1,
                    overlap=True, completion_sq_mean=256, steps_per_publish=10**6)
    kw = {"dtype": "bfloat16", "kv_bytes": 3200, "max_num_seqs": 8}  # 8 sequences per engine
    # one engine: 160 tokens at 1,091 tokens/s = 0.147 s; 8 ranks train 180 tokens in 0.8 ms
    plan = throughput(SMALL, QUICK_LINKS, Layout(ranks=8, engines=1, tp=1), work, **kw)
    assert plan.trainer_idle > 0.99
    queued, idle = warnings(plan, in_flight=33)
    assert "33 rollouts in flight but the engines decode 8 at once (4.1x" in queued
    assert "the trainer would idle 99%" in idle and "give generation more GPUs" in idle
    (only,) = warnings(plan, in_flight=32)  # 4x what the engines hold: no queue warning
    assert only.startswith("warning: the trainer")
    (ppo,) = warnings(plan, in_flight=8, overlap=False)
    assert "offpolicy.mode=pipelinerl overlaps them" in ppo
    # 30 engines: 160 tokens in 4.9 ms; one rank trains 180 tokens in 6.5 ms: it binds
    busy = throughput(SMALL, QUICK_LINKS, Layout(ranks=1, engines=30, tp=1), work, **kw)
    assert busy.trainer_idle < 0.01 and warnings(busy, in_flight=4 * 240) == []


@pytest.mark.parametrize(("gib", "name", "expected"), [
    (80, None, "H100-SXM"), (141, None, "H200-SXM"), (94, None, "H100-NVL"),
    (40, None, "A100-40GB"), (79.2, "NVIDIA H100 80GB HBM3", "H100-SXM"),
    (93.1, "NVIDIA H100 NVL", "H100-NVL"), (79.2, "NVIDIA H100 PCIe", "H100-PCIe"),
    (79.1, "NVIDIA A100-SXM4-80GB", "A100-80GB"), (139.8, "NVIDIA H200", "H200-SXM"),
    (139.8, "NVIDIA H200 NVL", "H200-NVL"), (80, "Some Other GPU", "H100-SXM"),
])
def test_the_gpu_model_by_device_name_else_by_memory(gib, name, expected):
    assert gpu_for(gib, name).name == expected


def test_an_unknown_gpu_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="GPU 'B300' is not registered; known: A100-40GB, "):
        gpu_named("B300")
