"""One optimizer step: zero advantage gives zero gradient; micro-batching equals one big batch."""

import contextlib
import dataclasses

import pytest
import torch
from accelerate import Accelerator
from conftest import fake_groups, tiny_qwen2

from scalerl.trainer.batch import collate
from scalerl.trainer.losses import loss_kwargs
from scalerl.trainer.policy import PolicyModule
from scalerl.trainer.step import StepSettings, _micro_loss, shard_rows, train_step


def settings(loss="cispo", micro=64):
    return StepSettings(loss=loss, loss_kwargs=loss_kwargs(loss, {}), micro_batch_size=micro,
                        temperature=1.0, fp32_head=True, max_grad_norm=None)


def batch_of(groups, aggregation="prompt"):
    return collate(groups, normalise="batch", aggregation=aggregation, pad_id=0)


@pytest.mark.parametrize("loss", ["cispo", "grpo", "dapo", "gspo"])
def test_zero_advantage_gives_zero_gradient_on_every_parameter(loss):
    model = tiny_qwen2()
    batch = batch_of(fake_groups())
    batch = dataclasses.replace(batch, advantages=torch.zeros_like(batch.advantages))
    out, _ = _micro_loss(PolicyModule(model), batch, settings(loss))
    out.backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, name


def test_shards_have_equal_micro_batch_counts_across_ranks():
    r0 = shard_rows(5, 0, 2, 2)
    r1 = shard_rows(5, 1, 2, 2)
    assert [t.tolist() for t in r0] == [[0, 2], [4]]
    assert [t.tolist() for t in r1] == [[1, 3], []]


@pytest.mark.parametrize("aggregation", ["token", "sample", "prompt"])
def test_gradient_accumulation_equals_one_big_batch(aggregation):
    batch = batch_of(fake_groups(n_prompts=3, n=4), aggregation)
    weights = {}
    for micro in (12, 5, 1):
        model = PolicyModule(tiny_qwen2(seed=1))
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        accelerator = Accelerator(cpu=True)
        model, opt = accelerator.prepare(model, opt)
        stats = train_step(accelerator, model, opt, sched, batch, settings(micro=micro))
        weights[micro] = (torch.nn.utils.parameters_to_vector(model.parameters()).detach(),
                          torch.tensor(stats["loss"]))  # float32 sums
    for micro in (5, 1):
        torch.testing.assert_close(weights[micro][0], weights[12][0])
        torch.testing.assert_close(weights[micro][1], weights[12][1])


def test_step_reports_token_statistics(model):
    model = PolicyModule(model)
    accelerator = Accelerator(cpu=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    batch = batch_of(fake_groups())
    stats = train_step(accelerator, model, opt, sched, batch, settings())
    assert stats["train_tokens"] == float(batch.mask.sum())
    assert 0.0 < stats["is_ratio_min"] < stats["is_ratio"] < stats["is_ratio_max"]
    assert 0.0 < stats["entropy"] <= torch.log(torch.tensor(48.0)).item() + 1e-4
    assert stats["mismatch_kl"] > 0.0


def test_a_step_raises_logprobs_of_correct_and_lowers_wrong_completions():
    from scalerl.trainer.policy import token_stats

    groups = fake_groups(n_prompts=2, n=4, forced=False)
    batch = batch_of(groups)
    model = PolicyModule(tiny_qwen2(seed=2))
    # generator logprobs = the model's own (on-policy), so every ratio is 1
    with torch.no_grad():
        lp = token_stats(model.model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                         batch.completion_lens).logprobs
    batch = dataclasses.replace(batch, old_logprobs=lp * batch.mask)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    train_step(Accelerator(cpu=True), model, opt, sched, batch, settings())
    with torch.no_grad():
        after = token_stats(model.model, batch.input_ids, batch.attention_mask,
                            batch.prompt_lens, batch.completion_lens).logprobs
    delta = ((after - lp) * batch.mask).sum(-1)  # (B,) change of each completion's logprob
    adv = batch.advantages.squeeze(-1)
    assert (delta[adv > 0] > 0).all() and (delta[adv < 0] < 0).all(), (delta, adv)


def _prepared(model, chunk_tokens=1024, optimizer=torch.optim.AdamW):
    accelerator = Accelerator(cpu=True)
    module = PolicyModule(model, chunk_tokens=chunk_tokens)
    opt = optimizer(module.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    module, opt = accelerator.prepare(module, opt)
    return accelerator, module, opt, sched


def test_every_tensor_of_a_step_is_placed_explicitly_so_a_meta_default_device_changes_nothing():
    # With torch's default device set to `meta`, any tensor made without an explicit device (a
    # CPU tensor meeting CUDA ones on a GPU) lands on meta and fails or poisons the step. The
    # optimizer's own state is made by a first step outside (AdamW keeps its step count on CPU).
    batch = batch_of(fake_groups(n_prompts=3, n=4), "prompt")
    step_settings = dataclasses.replace(settings(micro=5), max_grad_norm=1.0)
    runs = []
    for meta in (False, True):
        accelerator, model, opt, sched = _prepared(tiny_qwen2(seed=4), chunk_tokens=3)
        train_step(accelerator, model, opt, sched, batch, step_settings)
        with torch.device("meta") if meta else contextlib.nullcontext():
            stats = train_step(accelerator, model, opt, sched, batch, step_settings)
        runs.append((stats, torch.nn.utils.parameters_to_vector(model.parameters()).detach()))
    (plain, w_plain), (meta, w_meta) = runs
    assert w_meta.device.type == "cpu" and torch.equal(w_meta, w_plain)
    assert meta == plain


def test_gradient_checkpointing_and_head_chunks_leave_the_step_unchanged():
    from scalerl.trainer.policy import enable_gradient_checkpointing

    batch = batch_of(fake_groups(n_prompts=3, n=4), "prompt")
    results = []
    for checkpointing, chunk in ((False, 1024), (True, 1024), (False, 2), (True, 5)):
        model = tiny_qwen2(seed=5)
        if checkpointing:
            enable_gradient_checkpointing(model)
        accelerator, module, opt, sched = _prepared(model, chunk, torch.optim.SGD)
        stats = train_step(accelerator, module, opt, sched, batch, settings(micro=6))
        results.append((stats["loss"], stats["grad_norm"],
                        torch.nn.utils.parameters_to_vector(module.parameters()).detach()))
    loss, norm, weights = results[0]
    for other_loss, other_norm, other_weights in results[1:]:
        assert other_loss == pytest.approx(loss, rel=1e-6)
        assert other_norm == pytest.approx(norm, rel=1e-5)
        torch.testing.assert_close(other_weights, weights, rtol=1e-5, atol=1e-6)
