"""Per-step rollout metrics against hand counts; the JSONL cut on resume."""

import dataclasses
import json

from conftest import fake_groups

from scalerl.envs.base import Score
from scalerl.trainer.metrics import rollout_metrics, truncate_jsonl


def test_rollout_metrics_by_hand():
    groups = fake_groups(n_prompts=2, n=2)
    groups[1] = [dataclasses.replace(groups[1][0], task="synth_code", finish_reason="truncated"),
                 dataclasses.replace(groups[1][1], task="synth_code")]
    # statuses: (g+p) even -> correct: p0: [correct, wrong], p1: [wrong, correct]
    m = rollout_metrics(groups)
    assert "reward/mean" not in m  # rewards are the trainer's: reward_metrics, below
    assert m["train/arith/pass_rate"] == 0.5 and m["train/synth_code/pass_rate"] == 0.5
    assert m["rollout/truncated_frac"] == 0.25
    lengths = [len(r.token_ids) for g in groups for r in g]
    assert m["rollout/length_mean"] == sum(lengths) / 4


def test_interruptions_errors_and_timeouts_are_counted_apart():
    [group] = fake_groups(n_prompts=1, n=4)
    group = [
        # interrupted at its thinking budget, then out of answer budget: both facts count
        dataclasses.replace(group[0], interrupted=True, finish_reason="truncated"),
        dataclasses.replace(group[1], interrupted=True, finish_reason="interrupted"),
        dataclasses.replace(group[2], score=Score("error", "sandbox error")),
        dataclasses.replace(group[3], score=Score("timeout", "time limit")),
    ]
    m = rollout_metrics([group])
    assert m["rollout/interrupted_frac"] == 0.5
    assert m["rollout/truncated_frac"] == 0.25
    assert m["rollout/error_frac"] == 0.25  # error only: what filters.max_error_frac counts
    assert m["rollout/timeout_frac"] == 0.25


def test_truncate_jsonl_drops_steps_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 1, 2, 3, 2)))
    truncate_jsonl(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 2]


def test_compute_clock_counts_devices_held_and_keeps_validation_apart(monkeypatch):
    from scalerl.trainer import metrics

    now = [100.0]
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: now[0])
    clock = metrics.ComputeClock(devices=3, on_gpu=True)
    now[0] = 110.0  # 10 s of training
    with clock.apart():
        now[0] = 150.0  # 40 s of validation
    now[0] = 155.0  # 5 more s of training
    out = clock.tick(gen_tokens=7, train_tokens=5)
    assert out["compute/device_s"] == 15 * 3
    assert out["compute/gpu_hours"] == 45 / 3600
    assert out["compute/val_device_s"] == 40 * 3
    restored = metrics.ComputeClock(devices=3, on_gpu=True)
    restored.load_state_dict(clock.state_dict())
    assert (restored.device_s, restored.val_device_s, restored.gen_tokens) == (45, 120, 7)
