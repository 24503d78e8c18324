"""The dry run's micro-batch balance (scalerl/planning/balance.py): the assumed spread of lengths
by hand, the scalerl recipe's step packed over 3 and 4 ranks within the bound that
tests/trainer/test_balance.py derives, and the one line `scalerl train --dry-run` prints."""

from __future__ import annotations

import math

import pytest
from published_configs import QWEN3_8B, write_config

from scalerl.config import load_config
from scalerl.planning.balance import recipe_lengths, simulate_balance
from scalerl.planning.dry_run import describe, plan_run
from scalerl.planning.sizing import model_shape
from scalerl.planning.throughput import Workload

GIB = 2**30


def test_the_assumed_spread_by_hand():
    # 4 rows, mean completion 100: quantiles 1/8, 3/8, 5/8, 7/8 of [0, 200]
    assert recipe_lengths(4, 10, 100) == [35, 85, 135, 185]
    assert sum(recipe_lengths(768, 0, 7168)) / 768 == pytest.approx(7168, abs=1)
    with pytest.raises(ValueError, match="got 0, 512, 7168"):
        recipe_lengths(0, 512, 7168)


@pytest.mark.parametrize("ranks", [3, 4])
def test_the_recipe_step_is_balanced_within_the_derived_bound(tmp_path, ranks):
    shape = model_shape(write_config(tmp_path, QWEN3_8B))
    work = Workload(rollouts_per_step=768, prompt_tokens=512, completion_tokens=7168,
                    steps=7400, overlap=True, steps_per_publish=1)
    b = simulate_balance(shape, work, ranks, 16384)
    # rows 512..14,848 tokens: each over 8,192 needs a micro-batch of its own, and no plan
    # holds the 768 x 7,680 tokens in fewer than their total over ranks x 16,384
    lengths = recipe_lengths(768, 512, 7168)
    alone = sum(n > 8192 for n in lengths)
    assert b.micro_batches >= max(math.ceil(alone / ranks),
                                  math.ceil(sum(lengths) / (ranks * 16384)))
    # Qwen3-8B: 1.95e-5 per token²; a full micro-batch costs at most 16,384 x 1.32
    a = 36 * 32 * 128 / (8_190_735_360 - 151_936 * 4096)
    total = sum(n + a * n * n for n in lengths)
    assert 1.0 <= b.imbalance <= 1 + ranks * 16384 * (1 + a * 16384) / total <= 1.02


def test_the_dry_run_prints_the_balance_in_one_line(tmp_path):
    cfg = load_config("scalerl", overrides=[f"policy.model={write_config(tmp_path, QWEN3_8B)}"])
    run = plan_run(cfg, cfg.policy.model, gpus=8, gpu_bytes=80 * GIB, recipe="scalerl")
    lines = [line for line in describe(run) if line.startswith("micro-batches: ")]
    assert len(lines) == 1 and f"over {run.ranks} ranks" in lines[0]
    imbalance = float(lines[0].split("imbalance ")[1].split()[0])
    assert 1.0 <= imbalance <= 1.02
