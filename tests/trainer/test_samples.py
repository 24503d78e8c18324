"""Rollout samples (trainer/samples.py): which rollouts a table shows, what each row says, one
file per step, cut back on resume; and `log.tensorboard`, the old spelling, still read."""

import dataclasses
import json

import pytest
from conftest import fake_groups

from scalerl.envs.base import Score
from scalerl.trainer.samples import (
    COLUMNS,
    as_table,
    pick,
    sample_rows,
    samples_path,
    truncate_samples,
    write_samples,
)


def two_task_groups():
    groups = fake_groups(n_prompts=4, n=3)
    for g in groups[2:]:  # prompts 2 and 3 are code
        g[:] = [dataclasses.replace(r, task="synth_code") for r in g]
    return groups


def test_a_table_shows_one_rollout_per_prompt_before_a_second_of_any():
    groups = two_task_groups()
    picked = [(r.task, r.sample_id, r.group) for r in pick(groups, 3)]
    assert picked == [("arith", "s0", 0), ("arith", "s1", 0), ("arith", "s0", 1),
                      ("synth_code", "s2", 0), ("synth_code", "s3", 0), ("synth_code", "s2", 1)]
    assert len(pick(groups, 100)) == 12  # every rollout, when fewer than asked


def test_a_row_carries_the_reward_it_trained_with_and_its_lag():
    groups = two_task_groups()
    r = groups[0][0]
    groups[0][0] = dataclasses.replace(r, versions=(3,) * len(r.token_ids), reward=None,
                                       score=Score("error", "sandbox died"))
    # rewarded: what prepare_groups kept and rewarded (the error rollout has none); rewards
    # differ from the fake ones so that the row is seen to take them from here
    rewarded = [[dataclasses.replace(r, reward=0.5) for r in g if r.score.status != "error"]
                for g in groups]
    rows = sample_rows(groups, rewarded, step=7, trainer_version=6, per_task=2,
                       decode=lambda ids: f"<{len(ids)} tokens>")
    assert [list(row) for row in rows] == [list(COLUMNS)] * 4
    first = rows[0]
    assert (first["step"], first["task"], first["sample_id"], first["group"]) == (7, "arith",
                                                                                 "s0", 0)
    assert first["status"] == "error" and first["reward"] is None
    assert first["policy_version"] == 3 and first["lag"] == 3  # 6 - its oldest token's version
    assert first["prompt"] == f"<{len(groups[0][0].prompt_token_ids)} tokens>"
    assert rows[1]["reward"] == 0.5 and rows[1]["lag"] == 6  # versions 0: six behind
    assert {r["task"] for r in rows} == {"arith", "synth_code"}


def test_a_rollout_without_tokens_has_no_version_and_no_lag():
    """No policy sampled it (e.g. an episode whose sandbox failed before the first turn): the
    row says so instead of a lag counted from version -1."""
    groups = fake_groups(n_prompts=1, n=2)
    groups[0][0] = dataclasses.replace(groups[0][0], token_ids=(), logprobs=(), versions=(),
                                       score=Score("error", "sandbox did not start"))
    rows = sample_rows(groups, [[]], step=3, trainer_version=2, per_task=2,
                       decode=lambda ids: "")
    assert (rows[0]["policy_version"], rows[0]["lag"]) == (None, None)
    assert (rows[1]["policy_version"], rows[1]["lag"]) == (0, 2)


def test_two_tasks_with_the_same_sample_ids_keep_their_own_rewards():
    arith, code = fake_groups(n_prompts=1, n=2), fake_groups(n_prompts=1, n=2)
    code[0][:] = [dataclasses.replace(r, task="synth_code") for r in code[0]]
    assert arith[0][0].sample_id == code[0][0].sample_id  # "s0" in both tasks
    rewarded = [[dataclasses.replace(r, reward=1.0) for r in arith[0]],
                [dataclasses.replace(r, reward=-1.0) for r in code[0]]]
    rows = sample_rows(arith + code, rewarded, step=1, trainer_version=0, per_task=2,
                       decode=str)
    assert [(row["task"], row["reward"]) for row in rows] == [
        ("arith", 1.0), ("arith", 1.0), ("synth_code", -1.0), ("synth_code", -1.0)]


def test_each_step_has_its_own_file_and_a_resume_drops_the_later_ones(tmp_path):
    rows = sample_rows(fake_groups(2, 2), [], step=2, trainer_version=1, per_task=2,
                       decode=str)
    for step in (2, 4, 6):
        write_samples(tmp_path, step, [dict(r, step=step) for r in rows])
    assert json.loads(samples_path(tmp_path, 4).read_text().splitlines()[0])["step"] == 4
    assert json.loads(samples_path(tmp_path, 2).read_text().splitlines()[0])["step"] == 2
    truncate_samples(tmp_path, 4)  # resumed from the step-4 checkpoint
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [
        "step_000002.jsonl", "step_000004.jsonl"]
    columns, table = as_table(rows)
    assert columns == list(COLUMNS) and table[0][COLUMNS.index("sample_id")] == "s0"


def test_the_old_tensorboard_flag_is_read_as_a_tracker():
    from scalerl.config import ConfigError, config_from_data, load_config

    assert load_config(None).log.trackers == ("tensorboard",)
    assert load_config(None, ["log.tensorboard=false"]).log.trackers == ()
    assert load_config(None, ["log.trackers=[wandb]", "log.tensorboard=true"]
                       ).log.trackers == ("tensorboard", "wandb")
    old_run = {"log": {"tensorboard": True, "progress": False}}  # a config.yaml from before
    assert config_from_data(old_run).log.trackers == ("tensorboard",)
    with pytest.raises(ConfigError, match=r"^log.tensorboard = 'maybe': allowed: true or false$"):
        load_config(None, ["log.tensorboard=maybe"])
