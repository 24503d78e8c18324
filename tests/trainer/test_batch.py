"""Group preparation (errors, truncation, NPR bookkeeping, zero-variance) and collation."""

import dataclasses

import torch
from conftest import fake_groups

from scalerl.envs.base import Score
from scalerl.trainer.batch import collate, prepare_groups
from scalerl.trainer.filters import PromptRetirement
from scalerl.trainer.rewards import RewardMap


def set_status(group, statuses):
    """The verdicts `statuses`, with the ±1 rewards the default RewardMap gives them."""
    return [dataclasses.replace(r, score=Score(status=s), reward=1.0 if s == "correct" else -1.0)
            for r, s in zip(group, statuses, strict=True)]


def in_group_order(batch, groups) -> list[int]:
    """The batch row of each rollout, rollouts in group order (collate sorts rows by length)."""
    rows = []
    for r in (r for g in groups for r in g):
        seq = [*r.prompt_token_ids, *r.token_ids]
        rows.append(next(i for i in range(len(batch)) if i not in rows
                         and batch.attention_mask[i].sum() == len(seq)
                         and batch.input_ids[i, :len(seq)].tolist() == seq))
    return rows


def prepare(groups, retirement=None, **kw):
    args = dict(truncation="drop", rewards=RewardMap(), zero_variance_filter=True,
                retirement=retirement or PromptRetirement())
    return prepare_groups(groups, **(args | kw))


def test_zero_variance_groups_are_dropped_and_counted():
    g = fake_groups(n_prompts=3, n=4)
    g[0] = set_status(g[0], ["wrong"] * 4)
    g[1] = set_status(g[1], ["correct"] * 4)
    g[2] = set_status(g[2], ["correct", "wrong", "wrong", "wrong"])
    kept, report = prepare(g)
    assert [k[0].sample_id for k in kept] == ["s2"]
    assert (report.groups_in, report.zero_variance, report.zero_variance_rollouts) == (3, 2, 8)
    assert report.retired == 1  # s1 passed 4/4 >= 0.9


def test_collate_masks_forced_tokens_and_uses_generator_logprobs():
    groups = fake_groups(n_prompts=1, n=4)
    batch = collate(groups, normalise="none", aggregation="token", pad_id=0)
    first, row = groups[0][0], in_group_order(batch, groups)[0]
    n = len(first.token_ids)
    expected_mask = [0.0 if lp is None else 1.0 for lp in first.logprobs]
    assert batch.mask[row, :n].tolist() == expected_mask
    assert batch.mask[row, n:].sum() == 0
    sampled = [lp for lp in first.logprobs if lp is not None]
    got = [v for v, m in zip(batch.old_logprobs[row, :n].tolist(), expected_mask, strict=True)
           if m]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(sampled))
    torch.testing.assert_close(batch.weights.sum(), torch.tensor(1.0))


def test_std_scope_all_counts_filtered_rows_as_zero_advantages():
    groups = [set_status(fake_groups(1, 4)[0], ["correct", "wrong", "wrong", "wrong"])]
    common = dict(normalise="batch", aggregation="prompt", pad_id=0, eps=0.0)
    kept, with_zero = collate(groups, **common), collate(groups, zero_rows=4, **common)
    kept_only = kept.advantages.squeeze(-1)[in_group_order(kept, groups)]
    with_all = with_zero.advantages.squeeze(-1)[in_group_order(with_zero, groups)]
    # centred [1.5, -.5, -.5, -.5]: var 0.75 over 4 rows, 0.375 over 8 rows (4 zeros added)
    torch.testing.assert_close(kept_only, torch.tensor([1.5, -0.5, -0.5, -0.5]) / 0.75 ** 0.5)
    torch.testing.assert_close(with_all, torch.tensor([1.5, -0.5, -0.5, -0.5]) / 0.375 ** 0.5)


def test_error_verdicts_are_left_out_and_the_baseline_comes_from_the_rest():
    g = fake_groups(n_prompts=2, n=4)
    g[0] = set_status(g[0], ["correct", "wrong", "error", "wrong"])
    g[1] = set_status(g[1], ["correct", "wrong", "wrong", "correct"])
    kept, report = prepare(g)
    assert [len(k) for k in kept] == [3, 4]
    assert all(r.score.status != "error" for k in kept for r in k)
    assert (report.rollouts_in, report.error_excluded, report.error_groups_dropped) == (8, 1, 0)
    assert report.error_excluded_frac == 1 / 8
    batch = collate(kept, normalise="none", aggregation="prompt", pad_id=0)
    # group 0 without its error: rewards (1, -1, -1), mean -1/3; group 1: (1, -1, -1, 1), mean 0
    expected = torch.tensor([4 / 3, -2 / 3, -2 / 3, 1.0, -1.0, -1.0, 1.0])
    torch.testing.assert_close(batch.advantages.squeeze(-1)[in_group_order(batch, kept)],
                               expected)
    assert len(batch) == 7


def test_errors_never_enter_the_batch_std():
    g = [set_status(fake_groups(1, 4)[0], ["correct", "wrong", "error", "error"])]
    kept, _ = prepare(g)
    batch = collate(kept, normalise="batch", aggregation="prompt", pad_id=0, eps=0.0)
    # (1, -1) centred is (1, -1), std 1; trained as -1 the errors would give (1.5, -.5, -.5, -.5)
    torch.testing.assert_close(batch.advantages.squeeze(-1)[in_group_order(batch, kept)],
                               torch.tensor([1.0, -1.0]))


def test_a_group_left_with_fewer_than_two_rollouts_is_dropped():
    g = fake_groups(n_prompts=2, n=4)
    g[0] = set_status(g[0], ["error", "error", "error", "correct"])
    g[1] = set_status(g[1], ["error"] * 4)
    retirement = PromptRetirement(threshold=0.9)
    kept, report = prepare(g, retirement=retirement)
    assert kept == []
    assert (report.error_excluded, report.error_groups_dropped) == (7, 2)
    assert report.retired == 0 and not retirement.retired  # 1/1 correct is no evidence to retire


def test_rows_come_out_shortest_first_with_their_own_advantages_and_weights():
    groups = fake_groups(n_prompts=3, n=4, seed=2)
    common = dict(normalise="none", aggregation="prompt", pad_id=0)
    batch = collate(groups, **common)
    lengths = batch.attention_mask.sum(1).tolist()
    assert lengths == sorted(lengths) and len(set(lengths)) > 1
    rows = in_group_order(batch, groups)
    assert sorted(rows) == list(range(12))
    for g, group in enumerate(groups):  # prompt aggregation: each prompt's weights sum to 1/3
        torch.testing.assert_close(batch.weights[rows[4 * g:4 * g + 4]].sum(), torch.tensor(1 / 3))
        rewards = torch.tensor([1.0 if r.score.correct else -1.0 for r in group])
        torch.testing.assert_close(batch.advantages.squeeze(-1)[rows[4 * g:4 * g + 4]],
                                   rewards - rewards.mean())
