"""`collate` pads through flat arrays (trainer/columns.py): the very tensors that `torch.tensor`
over padded Python lists gave (the reference below is the implementation it replaced), None
logprobs (forced tokens) masked, a NaN logprob kept as NaN, an empty completion, and rows of
mixed prompt lengths."""

import dataclasses

import numpy as np
import pytest
import torch

from scalerl.benches.control_data import recipe_groups
from scalerl.envs.base import Score
from scalerl.rollout.types import Budget
from scalerl.trainer.batch import TrainBatch, collate
from scalerl.trainer.columns import Columns, padded
from scalerl.trainer.rewards import RewardMap


def reference_pad(rows, value, dtype):
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


def test_padded_rows_are_torch_tensor_over_padded_lists():
    rows = [[1.5, -2.25, 3.1], [], [0.1]]
    flat = np.array([1.5, -2.25, 3.1, 0.1])
    lengths = np.array([3, 0, 1])
    for dtype in (torch.float32, torch.float64):
        assert torch.equal(padded(flat, lengths, 0.0, dtype), reference_pad(rows, 0.0, dtype))
    assert padded(np.array([7, 8, 9]), np.array([1, 2]), -1, torch.long).tolist() == [
        [7, -1], [8, 9]]


def groups_with_edges():
    budget = Budget(thinking=(40, 80), answer=16)
    groups = recipe_groups(6, 4, [budget], max_model_len=600, seed=1)
    r = groups[0][0]
    groups[0][0] = dataclasses.replace(r, logprobs=(float("nan"),) + r.logprobs[1:])
    groups[1][0] = dataclasses.replace(groups[1][0], token_ids=(), logprobs=(), versions=())
    groups[2][1] = dataclasses.replace(groups[2][1], prompt_token_ids=(5, 6, 7))
    return [RewardMap().assign(g) for g in groups]


def test_collate_gives_exactly_the_tensors_of_padded_lists():
    groups = groups_with_edges()
    batch = collate(groups, normalise="batch", aggregation="prompt", pad_id=3)
    rollouts = [r for g in groups for r in g]
    seqs = [list(r.prompt_token_ids) + list(r.token_ids) for r in rollouts]
    order = torch.argsort(torch.tensor([len(s) for s in seqs]), stable=True)
    expected = {
        "input_ids": reference_pad(seqs, 3, torch.long),
        "attention_mask": reference_pad([[1] * len(s) for s in seqs], 0, torch.long),
        "old_logprobs": reference_pad([[0.0 if lp is None else lp for lp in r.logprobs]
                                       for r in rollouts], 0.0, torch.float32),
        "mask": reference_pad([[0.0 if lp is None else 1.0 for lp in r.logprobs]
                               for r in rollouts], 0.0, torch.float32)}
    assert any(lp is None for r in rollouts for lp in r.logprobs)  # forced tokens are there
    for name, tensor in expected.items():
        assert torch.equal(getattr(batch, name), tensor[order], ) or name == "old_logprobs"
    got, want = batch.old_logprobs, expected["old_logprobs"][order]
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got).sum() == 1
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    assert batch.completion_lens[order.argsort()].tolist() == [
        max(len(r.token_ids), 1) for r in rollouts]
    assert isinstance(batch, TrainBatch)


def test_columns_refuse_rollouts_whose_fields_disagree():
    r = groups_with_edges()[0][1]
    bad = dataclasses.replace(r, versions=r.versions[:-1], score=Score(status="wrong"))
    with pytest.raises(ValueError, match=r"tokens, .* logprobs and .* versions; they must be"):
        Columns.of([bad])
