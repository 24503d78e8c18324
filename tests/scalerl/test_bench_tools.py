"""`scalerl bench tools --json`: a user's function tool through the guarded path beside direct
calls, in one run; the outputs must be the same (the bench refuses to report otherwise)."""

from __future__ import annotations

from bench_cli import bench_json


def test_bench_tools_reports_both_rates_and_their_ratio():
    result = bench_json("tools", "--calls", "300", timeout_s=120)
    assert result["calls"] == 300
    assert result["baseline_per_s"] > result["guarded_per_s"] > 0  # the guards cost something
    assert abs(result["ratio"] - result["guarded_per_s"] / result["baseline_per_s"]) < 1e-6
    assert result["guard_us_per_call"] > 0
