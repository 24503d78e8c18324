"""The chunked LM head: the values and gradients of the full computation, one chunk at a time."""

import math

import pytest
import torch

from scalerl.trainer.head import head_token_stats


def test_logprob_and_entropy_of_a_hand_worked_head():
    # logits of one token: h . rows of W = [1, 0, 0] (temperature 1), target 0:
    # logprob = 1 - log(e + 2); p = (e, 1, 1) / (e + 2); entropy = -sum p log p.
    h = torch.tensor([[1.0, 0.0]])
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    logprob, entropy = head_token_stats(h, w, None, torch.tensor([0]), chunk=1)
    z = math.e + 2
    expected_entropy = -(math.e / z * (1 - math.log(z)) + 2 / z * (0 - math.log(z)))
    assert logprob.item() == pytest.approx(1 - math.log(z), abs=1e-6)
    assert entropy.item() == pytest.approx(expected_entropy, abs=1e-6)
    # at temperature 2 the logits halve: [0.5, 0, 0]
    logprob2, _ = head_token_stats(h, w, None, torch.tensor([1]), temperature=2.0)
    assert logprob2.item() == pytest.approx(-math.log(math.exp(0.5) + 2), abs=1e-6)


def full_reference(h, w, b, targets, temperature):
    logits = torch.nn.functional.linear(h.float(), w.float(), None if b is None else b.float())
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_equal_the_full_computation(chunk, bias):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 5, 8, generator=g, requires_grad=True)
    w = torch.randn(11, 8, generator=g, requires_grad=True)
    b = torch.randn(11, generator=g, requires_grad=True) if bias else None
    targets = torch.randint(0, 11, (2, 5), generator=g)
    weights = torch.randn(2, 5, generator=g)
    lp, ent = head_token_stats(h, w, b, targets, temperature=0.7, chunk=chunk)
    (lp * weights).sum().backward()
    grads = [t.grad.clone() for t in (h, w, b) if t is not None]
    for t in (h, w, b):
        if t is not None:
            t.grad = None
    ref_lp, ref_ent = full_reference(h, w, b, targets, 0.7)
    (ref_lp * weights).sum().backward()
    torch.testing.assert_close(lp, ref_lp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent.detach(), rtol=1e-5, atol=1e-6)
    assert not ent.requires_grad
    for got, t in zip(grads, [t for t in (h, w, b) if t is not None], strict=True):
        torch.testing.assert_close(got, t.grad, rtol=1e-5, atol=1e-6)


def test_bf16_hidden_states_with_the_fp32_head_match_an_fp32_head_on_the_same_values():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(6, 16, generator=g).to(torch.bfloat16).requires_grad_()
    w = torch.randn(32, 16, generator=g).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 32, (6,), generator=g)
    lp, _ = head_token_stats(h, w, None, targets, fp32=True, chunk=4)
    lp.sum().backward()
    assert lp.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.bfloat16
    h32, w32 = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    ref, _ = full_reference(h32, w32, None, targets, 1.0)
    ref.sum().backward()
    torch.testing.assert_close(lp, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, w32.grad.to(torch.bfloat16))
    # without the FP32 head the logits are rounded to bf16 first: visibly further from fp32
    lp16, _ = head_token_stats(h.detach(), w.detach(), None, targets, fp32=False)
    assert (lp16 - ref).abs().max() > (lp - ref).abs().max()


def test_a_chunk_below_one_token_is_refused():
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        head_token_stats(torch.zeros(1, 2), torch.zeros(3, 2), None, torch.tensor([0]), chunk=0)


def test_bf16_operands_are_vllms_fp32_head_products_of_rounded_values_summed_in_fp32():
    # vLLM 0.32's FP32 head with a bf16 engine: torch.mm(bf16 h, bf16 W, out_dtype=float32)
    g = torch.Generator().manual_seed(2)
    h = torch.randn(7, 16, generator=g, requires_grad=True)
    w = torch.randn(40, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 40, (7,), generator=g)
    lp, ent = head_token_stats(h, w, None, targets, chunk=3, operands=torch.bfloat16)
    lp.sum().backward()
    assert lp.dtype == torch.float32
    hr = h.detach().bfloat16().float().requires_grad_()
    wr = w.detach().bfloat16().float().requires_grad_()
    ref, ref_ent = full_reference(hr, wr, None, targets, 1.0)
    ref.sum().backward()
    torch.testing.assert_close(lp, ref)
    torch.testing.assert_close(ent, ref_ent.detach())
    full, _ = head_token_stats(h.detach(), w.detach(), None, targets)  # fp32 operands
    assert (full - lp).abs().max() > 1e-4  # the rounding is visible
    # gradients reach the fp32 tensors through the rounding, within bf16's resolution
    torch.testing.assert_close(h.grad, hr.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w.grad, wr.grad, rtol=2e-2, atol=2e-2)


def test_the_fp32_weight_gradient_of_bf16_operands_is_summed_and_returned_unrounded():
    """dW = sum over chunks of dz^T h, dz and h the bf16 operands: summed in fp32 into the fp32
    gradient (GPU: torch.addmm(..., out_dtype=float32, out=grad)); it used to be each chunk's
    bf16 product, an fp32 copy of it, and the sum rounded to bf16 before autograd cast it back."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(9, 16, generator=g, requires_grad=True)
    w = torch.randn(40, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 40, (9,), generator=g)
    grads = {}
    for how in ("addmm", "matmul"):
        w.grad = None
        lp, _ = head_token_stats(h, w, None, targets, chunk=4, operands=torch.bfloat16,
                                 temperature=0.7, accumulate=how)
        lp.sum().backward()
        grads[how] = w.grad.clone()
    assert grads["addmm"].dtype == torch.float32
    # by hand: softmax of the rounded operands' logits, dz = (onehot - p) / T in bf16, per row
    hr, wr = h.detach().bfloat16(), w.detach().bfloat16()
    p = torch.softmax(hr.double() @ wr.double().t() / 0.7, -1)
    dz = ((torch.nn.functional.one_hot(targets, 40) - p) / 0.7).bfloat16()
    ref = dz.double().t() @ hr.double()
    torch.testing.assert_close(grads["addmm"].double(), ref, rtol=2e-2, atol=1e-6)
    err = {k: (v.double() - ref).abs().max().item() for k, v in grads.items()}
    assert err["addmm"] < 1e-5 < err["matmul"], err  # the old path rounds to bf16 twice
    with pytest.raises(ValueError, match="accumulate 'mm': one of addmm, matmul"):
        head_token_stats(h, w, None, targets, accumulate="mm")


@pytest.mark.parametrize("body", [torch.bfloat16, torch.float32])
def test_the_final_norm_gives_the_head_vllms_bf16_values_bit_for_bit(body):
    """vLLM 0.32's RMSNorm (vllm/ir/ops/layernorm.py, native): normalised in fp32, cast to the
    bf16 weight's dtype, times the bf16 weight. transformers multiplies by the fp32 master
    weight, so the bf16 operands the FP32 head rounds to came from another product."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from vllm.ir.ops.layernorm import rms_norm

    from scalerl.trainer.head import match_engine_norm

    config = Qwen3Config(vocab_size=64, hidden_size=256, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=128)
    model = Qwen3ForCausalLM(config)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        model.model.norm.weight.copy_(1 + torch.randn(256, generator=g) / 3)
    x = torch.randn(64, 256, generator=g).bfloat16()
    w = model.model.norm.weight
    vllm = rms_norm.impls["native"].impl_fn(x, w.detach().bfloat16(), config.rms_norm_eps)
    hf = model.model.norm(x.to(body)).bfloat16()  # what the head's bf16 operands were
    assert not torch.equal(hf, vllm)  # the fp32 weight's product, rounded: some differ
    assert match_engine_norm(model, torch.bfloat16)
    ours = model.model.norm(x.to(body))
    assert ours.dtype == body and torch.equal(ours.bfloat16(), vllm)
    ours.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32
    assert [n for n, _ in model.named_parameters()][-2:] == ["model.norm.weight",
                                                             "lm_head.weight"]
