"""Per-step rollout metrics against hand counts; the JSONL cut on resume."""

import dataclasses
import json

from conftest import fake_groups

from scalerl.trainer.metrics import rollout_metrics, truncate_jsonl


def test_rollout_metrics_by_hand():
    groups = fake_groups(n_prompts=2, n=2)
    groups[1] = [dataclasses.replace(groups[1][0], task="synth_code", finish_reason="truncated"),
                 dataclasses.replace(groups[1][1], task="synth_code")]
    # statuses: (g+p) even -> correct: p0: [correct, wrong], p1: [wrong, correct]
    m = rollout_metrics(groups)
    assert m["reward/mean"] == 0.0
    assert m["train/arith/pass_rate"] == 0.5 and m["train/synth_code/pass_rate"] == 0.5
    assert m["rollout/truncated_frac"] == 0.25
    lengths = [len(r.token_ids) for g in groups for r in g]
    assert m["rollout/length_mean"] == sum(lengths) / 4


def test_truncate_jsonl_drops_steps_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 1, 2, 3, 2)))
    truncate_jsonl(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 2]
