"""`scalerl bench pipeline`'s repeats: each repeat's ratio from its own two modes, and every
figure's median and min-max over the repeats (scalerl/benches/pipeline.py). Pure arithmetic on
hand-made repeats, worked out by hand; the bench itself runs in test_bench_servers.py."""

import pytest

from scalerl.benches.pipeline import one_repeat, summarise


def mode(steps_per_s: float, gen: float, sync: float, tokens: float = 9000.0) -> dict:
    return {"steps_per_s": steps_per_s, "steps": 12, "tokens_per_step": tokens,
            "gen_s_per_step": gen, "sync_s_per_step": sync}


def test_each_repeat_compares_its_own_two_modes_and_the_summary_is_median_and_range():
    step_s = 1.0
    reps = [
        # ratio 0.6 / 0.4 = 1.5; ideal (2 + 1 + 0.5) / (2 + 0.5) = 1.4
        one_repeat({"ppo": mode(0.4, 2.0, 0.5), "pipelinerl": mode(0.6, 2.5, 0.1)}, step_s,
                   "pipelinerl"),
        # ratio 0.3 / 0.5 = 0.6 (a noisy repeat); ideal (0.5 + 1 + 0.5) / (1 + 0.5) = 4/3
        one_repeat({"ppo": mode(0.5, 0.5, 0.5, 8000.0), "pipelinerl": mode(0.3, 3.0, 0.2)}, step_s,
                   "ppo"),
        # ratio 0.45 / 0.3 = 1.5 exactly as the first; ideal (3 + 1 + 0) / 3 = 4/3
        one_repeat({"ppo": mode(0.3, 3.0, 0.0), "pipelinerl": mode(0.45, 3.5, 0.3)}, step_s,
                   "pipelinerl"),
    ]
    assert [r["ratio"] for r in reps] == pytest.approx([1.5, 0.6, 1.5])
    assert [r["ideal_ratio"] for r in reps] == pytest.approx([1.4, 4 / 3, 4 / 3])
    assert [r["first"] for r in reps] == ["pipelinerl", "ppo", "pipelinerl"]

    out = summarise(reps)
    # the median ratio is one repeat's own (1.5), not the ratio of the medians (0.45 / 0.4)
    assert out["ratio"] == pytest.approx(1.5)
    assert out["spread"]["ratio"] == pytest.approx({"median": 1.5, "min": 0.6, "max": 1.5})
    assert out["ideal_ratio"] == pytest.approx(4 / 3)
    assert out["spread"]["ideal_ratio"] == pytest.approx(
        {"median": 4 / 3, "min": 4 / 3, "max": 1.4})
    assert out["ppo"] == pytest.approx({"steps": 12, "steps_per_s": 0.4, "gen_s_per_step": 2.0,
                                        "sync_s_per_step": 0.5, "tokens_per_step": 9000.0})
    assert out["pipelinerl"] == pytest.approx({"steps": 12, "steps_per_s": 0.45,
                                               "gen_s_per_step": 3.0, "sync_s_per_step": 0.2,
                                               "tokens_per_step": 9000.0})
    assert out["spread"]["ppo_tokens_per_step"] == pytest.approx(
        {"median": 9000.0, "min": 8000.0, "max": 9000.0})
    assert out["spread"]["pipelinerl_steps_per_s"] == pytest.approx(
        {"median": 0.45, "min": 0.3, "max": 0.6})
    assert out["spread"]["ppo_sync_s_per_step"] == pytest.approx(
        {"median": 0.5, "min": 0.0, "max": 0.5})
