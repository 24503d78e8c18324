"""`scalerl bench control --json` on a small step of the scalerl recipe (4 prompts x 4
rollouts of up to ~14k tokens): both hand-over paths run under the 2-rank torchrun and the
new one sends no rollout tokens pickled (the light groups are a small fraction of the
pickled rollouts)."""

import pytest
from bench_cli import bench_json


@pytest.mark.slow
def test_bench_control_times_both_hand_overs_and_collates():
    out = bench_json("control", "--set", "offpolicy.prompts_per_step=4", "--set",
                     "offpolicy.rollouts_per_prompt=4", "--repeats", "1", "--decode-sample",
                     "4", timeout_s=600)
    assert out["rollouts"] == 16 and out["completion_tokens"] > 16 * 64
    for key in ("handover_s", "handover_before_s", "collate_s", "collate_before_s",
                "decode_s", "pickle_send_s"):
        assert out[key] > 0, key
    assert out["light_mb"] < out["pickled_mb"] / 20  # no per-token fields pickled any more
    assert out["handover_ratio"] == pytest.approx(out["handover_before_s"] / out["handover_s"])
