"""The dry run's advice (scalerl/planning/advice.py): the micro-batch it puts in the launch line
only for packed rows, larger than the config's and holding a full-length row, at most a rank's
tokens per step; worked by hand."""

from __future__ import annotations

from published_configs import QWEN3_8B_PARAMS

from scalerl.planning.advice import bigger_micro, micro_fit
from scalerl.planning.sizing import ModelShape, TrainerLayout
from scalerl.planning.throughput import Workload

QWEN3_8B = ModelShape(params=QWEN3_8B_PARAMS, layers=36, hidden=4096, intermediate=12288,
                      heads=32, kv_heads=8, head_dim=128, vocab=151936, tied=False, qk_norm=True)


def test_the_launch_line_sets_a_larger_packed_micro_batch_only():
    assert bigger_micro(21504, 16384, 16384) == 21504
    assert bigger_micro(21504, None, 16384) is None  # padded rows: advice only
    assert bigger_micro(16384, 16384, 16384) is None  # no larger
    assert bigger_micro(12288, 8192, 16384) is None  # holds no full-length row


def test_the_micro_batch_is_at_most_a_rank_s_tokens_per_step():
    layout = TrainerLayout(ranks=4, sharded=True, dtype="auto", fp32_head=True,
                           checkpointing=True, micro_tokens=16384, logit_chunk_tokens=1024)
    work = Workload(768, 512, 7168, 1, overlap=True)
    # 768 x 7,680 tokens over 4 ranks = 1,474,560 = 1,440 x 1,024: a room of a petabyte
    assert micro_fit(QWEN3_8B, layout, work, 10**15) == 1_474_560
    assert micro_fit(QWEN3_8B, layout, work, 0) == 0  # not even 1,024 tokens
