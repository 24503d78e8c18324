"""`scalerl bench grading --json`: local, Ray on 1 and on 2 nodes (raylets here), with ratios.

Slow: starts two Ray clusters (about 5 s each) in the bench's process."""

import pytest
from bench_cli import bench_json


@pytest.mark.slow
@pytest.mark.bwrap
def test_bench_grading_reports_the_three_setups_and_their_ratios():
    r = bench_json("grading", "--n", "6", "--workers", "3", "--sessions", "2", "--calls", "3",
                   "--sequential", "2", timeout_s=400)
    for name in ("local", "ray_1_node", "ray_2_nodes"):
        assert r[name]["correct"] == 6, r  # reference solutions: every verdict correct
        assert r[name]["tool_calls_ok"] == 2 * 3, r  # state kept across each session's calls
        assert r[name]["verdicts_per_s"] > 0 and r[name]["tool_calls_per_s"] > 0
    for name in ("ray_1_node", "ray_2_nodes"):
        ratio = r[f"{name}_vs_local"]
        assert ratio["verdicts_per_s"] == pytest.approx(
            r[name]["verdicts_per_s"] / r["local"]["verdicts_per_s"], abs=2e-3)
        assert ratio["added_latency_ms"] == pytest.approx(
            r[name]["latency_ms"] - r["local"]["latency_ms"], abs=0.11)
