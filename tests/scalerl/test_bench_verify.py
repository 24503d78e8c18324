"""`scalerl bench verify --quick --json`: one JSON object with both rates and adversarial latencies.

Speed figures depend on the machine, so this checks the shape, that both sides agree on every
verdict, and that every adversarial input finishes within its deadline plus the kill.
"""

from __future__ import annotations

import argparse

from bench_cli import bench_json

from scalerl.benches import verify
from scalerl.benches.verify import adversarial_inputs, make_mix


def test_the_mix_is_deterministic_and_realistic():
    a, b = make_mix(6, 4, seed=3), make_mix(6, 4, seed=3)
    assert a == b and len(a) == 24
    assert make_mix(6, 4, seed=4) != a
    assert all(c.startswith("<think>") and "</think>" in c and "\\boxed{" in c for c, _ in a)
    assert len({gold for _, gold in a}) == 6


def test_adversarial_inputs_are_what_the_issue_names():
    inputs = adversarial_inputs(quick=True)
    assert "2^{2^{2^{2^{2^{100}}}}}" in inputs["tower_vs_int"][0]
    assert inputs["braces_3000_deep"][0].count("{") == 3000
    assert len(inputs["completion_2mb"][0]) >= 2_000_000


def test_bench_verify_quick_json():
    result = bench_json("verify", "--quick", "--prompts", "6", "--timeout", "2", timeout_s=300)
    assert result["items"] == 6 * 8
    assert result["baseline_per_s"] > 0 and result["pool_per_s"] > 0
    assert abs(result["ratio"] - result["pool_per_s"] / result["baseline_per_s"]) < 0.02
    assert result["verdicts_differ"] == 0
    assert sum(result["pool_statuses"].values()) == 48
    adv = result["adversarial"]
    assert set(adv) == {"tower_vs_int", "tower_vs_tower", "braces_3000_deep", "completion_2mb"}
    assert adv["braces_3000_deep"]["status"] == "timeout"
    assert adv["completion_2mb"]["status"] == "correct"
    assert result["adversarial_max_s"] == max(v["seconds"] for v in adv.values())
    assert result["adversarial_max_s"] <= 2 + 3  # the 2 s deadline plus killing the worker


def test_bad_worker_count_is_refused(capsys):
    args = argparse.Namespace(workers=0, json=True, quick=True)
    assert verify.run(args) == 2
    assert "--workers must be >= 1, got 0" in capsys.readouterr().err
