"""`scalerl bench rollout --server` and `scalerl bench pipeline` on the session's vLLM servers.

Slow: real servers (tests/conftest.py `vllm_servers`) and, for the rollout bench, an in-process
engine beside them. The figures are machine-dependent; this checks that each is measured and that
the ratios are the ones the bench's formulas define (the targets are reported, not asserted, on
a noisy shared machine), plus a floor that only a gross regression breaks.
"""

import pytest
from bench_cli import bench_json

pytestmark = pytest.mark.slow


def test_bench_rollout_times_servers_beside_the_in_process_generator(vllm_servers):
    url = vllm_servers.urls[0]
    ratios = []
    for _ in range(2):  # a second run when the other xdist worker's load fell on one side only
        out = bench_json("rollout", "--prompts", "16", "--n", "4", "--repeats", "1",
                         "--server", url)
        assert out["rollouts"] == 64 and out["servers"] == [url] and out["repeats"] == 1
        assert out["engine_tok_s"] > 0 and out["server_tok_s"] > 0
        assert out["server_ratio"] == pytest.approx(out["server_tok_s"] / out["engine_tok_s"],
                                                    abs=2e-3)
        ratios.append(out["server_ratio"])
        if ratios[-1] > 0.2:
            break
    # measured 0.55-0.6 on 2 shared cores; 0.14 once in CI while the other worker ran LoRA runs
    assert max(ratios) > 0.2, ratios


def test_bench_pipeline_reports_both_modes_and_what_perfect_overlap_would_give(vllm_servers):
    out = bench_json("pipeline", "--steps", "3", "--repeats", "2", "--server",
                     vllm_servers.urls[0], "--set", "offpolicy.prompts_per_step=4", "--set",
                     "offpolicy.rollouts_per_prompt=4", "--set", "offpolicy.max_lag=2")
    assert out["step_s"] > 0 and out["generation"] == "servers" and out["max_lag"] == 2
    assert out["repeats"] == 2 and len(out["runs"]) == 2
    # the order alternates, so a load that drifts during the run weighs on both modes
    assert [r["first"] for r in out["runs"]] == ["pipelinerl", "ppo"]
    step = out["step_s"]
    for rep in out["runs"]:
        ppo, pipe = rep["ppo"], rep["pipelinerl"]
        for mode in (ppo, pipe):
            assert mode["steps"] == 3 and mode["steps_per_s"] > 0 and mode["tokens_per_step"] > 0
        # each repeat's ratio is its own two modes', measured back to back
        assert rep["ratio"] == pytest.approx(pipe["steps_per_s"] / ppo["steps_per_s"])
        gen, sync = ppo["gen_s_per_step"], ppo["sync_s_per_step"]
        assert rep["ideal_ratio"] == pytest.approx((gen + step + sync) / (max(gen, step) + sync))
        assert 1.0 < rep["ideal_ratio"] <= 2.0
        assert 1 / pipe["steps_per_s"] >= step  # a pipelined step still holds the stand-in step
    ratios = sorted(r["ratio"] for r in out["runs"])
    # the top-level figures are the medians (of two: their mean), with the range beside them
    assert out["ratio"] == pytest.approx(sum(ratios) / 2)
    assert out["spread"]["ratio"] == pytest.approx(
        {"median": sum(ratios) / 2, "min": ratios[0], "max": ratios[1]})
    pipe_rates = [r["pipelinerl"]["steps_per_s"] for r in out["runs"]]
    assert out["pipelinerl"]["steps_per_s"] == pytest.approx(sum(pipe_rates) / 2)
