"""The LM head over completion positions, in chunks of tokens: logprobs of the taken tokens and
the entropy there, without ever holding the (tokens, vocabulary) logits.

At 8 sequences x 14k tokens x a 152k vocabulary one fp32 logits tensor is ~70 GB, and autograd
would keep several (logits, log-softmax, its exponential). Here the forward computes, per chunk of
`chunk` tokens, the logits, their log-sum-exp, the taken token's logprob and the entropy, and
keeps only the hidden states and one log-sum-exp per token; the backward recomputes each chunk's
logits and applies the softmax gradient: d logprob / d logits = onehot(target) - softmax. The
values are those of the full computation (same operations, same dtypes, per row); only the
weight gradient is summed chunk by chunk (in fp32), and not at all for a frozen head (LoRA).
The entropy is a statistic: no gradient.
No model and no loss here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def _logits(h: Tensor, weight: Tensor, bias: Tensor | None, temperature: float,
            fp32_out: bool) -> Tensor:
    """fp32 logits at the sampling temperature (h and weight already in the operands' dtype).
    `fp32_out` with narrower operands: products accumulated and returned in fp32, as vLLM 0.32's
    FP32 head does (`torch.mm(bf16, bf16, out_dtype=float32)` on GPU; on CPU, which lacks that
    kernel, the same products of the rounded values in fp32)."""
    if not fp32_out or h.dtype == torch.float32:
        return F.linear(h, weight, bias).float().div_(temperature)
    if h.is_cuda:
        z = torch.mm(h, weight.t(), out_dtype=torch.float32)
    else:
        z = F.linear(h.float(), weight.float())
    if bias is not None:
        z += bias.float()
    return z.div_(temperature)


class _ChunkedHead(torch.autograd.Function):
    """(N, H) hidden states -> (N,) logprobs of `targets` and (N,) entropies, chunk by chunk."""

    @staticmethod
    def forward(ctx, h, master, bias, targets, temperature, chunk, shape, fp32_out, accumulate):
        weight = master.to(h.dtype)  # the operands' copy (the weight itself when no cast)
        n = h.shape[0]
        out_lp = torch.empty(shape, dtype=torch.float32, device=h.device)
        out_ent = torch.empty(shape, dtype=torch.float32, device=h.device)
        logprobs, entropy = out_lp.view(-1), out_ent.view(-1)  # written through flat views
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        with torch.autocast(device_type=h.device.type, enabled=False):
            for s in range(0, n, chunk):
                z = _logits(h[s:s + chunk], weight, bias, temperature, fp32_out)
                norm = z.logsumexp(-1)
                lse[s:s + chunk] = norm
                logprobs[s:s + chunk] = z.gather(-1, targets[s:s + chunk, None]).squeeze(-1) - norm
                z -= norm[:, None]  # log-softmax, in place
                entropy[s:s + chunk] = -(z.exp().mul_(z)).sum(-1)
        ctx.save_for_backward(h, weight, bias, targets, lse)
        ctx.temperature, ctx.chunk, ctx.fp32_out = temperature, chunk, fp32_out
        ctx.master_dtype, ctx.accumulate = master.dtype, ACCUMULATE[accumulate]
        ctx.mark_non_differentiable(out_ent)
        return out_lp, out_ent

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        h, weight, bias, targets, lse = ctx.saved_tensors
        chunk, temperature = ctx.chunk, ctx.temperature
        grad_logprobs = grad_logprobs.reshape(-1)
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        want_w = ctx.needs_input_grad[1]  # a frozen head (LoRA) needs no weight gradient
        grad_w = (torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
                  if want_w else None)
        grad_b = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32,
                                                       device=bias.device)
        with torch.autocast(device_type=h.device.type, enabled=False):
            for s in range(0, h.shape[0], chunk):
                hc, g = h[s:s + chunk], grad_logprobs[s:s + chunk].float()[:, None]
                z = _logits(hc, weight, bias, temperature, ctx.fp32_out)
                probs = z.sub_(lse[s:s + chunk, None]).exp_()  # softmax, in place
                dz = probs.mul_(-g).scatter_add_(-1, targets[s:s + chunk, None], g)
                dz = dz.div_(temperature).to(h.dtype)
                if grad_h is not None:
                    grad_h[s:s + chunk] = dz @ weight
                if want_w:
                    ctx.accumulate(grad_w, dz, hc)
                if grad_b is not None:
                    grad_b += dz.float().sum(0)
        # the master weight's own dtype: an fp32 master gets the fp32 sum itself (no bf16
        # rounding of it, no bf16 copy and no cast back by autograd)
        grad_w = None if grad_w is None else grad_w.to(ctx.master_dtype)
        grad_b = None if grad_b is None else grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


def _addmm_fp32(grad_w: Tensor, dz: Tensor, hc: Tensor) -> None:
    """grad_w (fp32) += dz^T hc, the products of narrower operands summed into grad_w in fp32
    with no (vocabulary, hidden) temporary: `torch.addmm(..., out_dtype=float32, out=grad_w)`
    on CUDA (aten::addmm.dtype_out, torch 2.13; NOT RUN ON A GPU YET), the same sums from the
    operands cast to fp32 on CPU, which has no such kernel."""
    if dz.dtype == grad_w.dtype:
        grad_w.addmm_(dz.t(), hc)
    elif dz.is_cuda and not _ADDMM_REFUSED:
        try:
            torch.addmm(grad_w, dz.t(), hc, out_dtype=torch.float32, out=grad_w)
        except RuntimeError:  # a build whose kernel wants `self` in the operands' dtype
            _refuse_addmm()
            grad_w += torch.mm(dz.t(), hc, out_dtype=torch.float32)
    elif dz.is_cuda:  # one fp32 (vocabulary, hidden) temporary, as vLLM's own fp32 matmul
        grad_w += torch.mm(dz.t(), hc, out_dtype=torch.float32)
    else:
        grad_w.addmm_(dz.t().float(), hc.float())


_ADDMM_REFUSED = False
"""The CUDA `addmm.dtype_out` kernel refused an fp32 `self` once (older torch builds check
self's dtype against the operands'); later calls take `torch.mm(..., out_dtype=float32)`."""


def _refuse_addmm() -> None:
    global _ADDMM_REFUSED
    _ADDMM_REFUSED = True


def _matmul_then_cast(grad_w: Tensor, dz: Tensor, hc: Tensor) -> None:
    """The former accumulation, kept to measure against (scripts/gpu-check): dz^T hc in the
    operands' dtype (a bf16 (vocabulary, hidden) temporary, rounded), then an fp32 copy of it."""
    if dz.dtype == grad_w.dtype:
        grad_w.addmm_(dz.t(), hc)
    else:
        grad_w += (dz.t() @ hc).float()


ACCUMULATE = {"addmm": _addmm_fp32, "matmul": _matmul_then_cast}
"""How the head's backward sums the weight gradient, by name (`head_token_stats(accumulate=)`)."""


ENGINE_ORDER_NORMS = ("Qwen2RMSNorm", "Qwen3RMSNorm", "LlamaRMSNorm")
"""transformers' RMSNorms computed as `weight * normed.to(input dtype)` (transformers 5:
models/qwen3/modeling_qwen3.py Qwen3RMSNorm.forward; Qwen2's and Llama's are the same), whose
final norm `match_engine_norm` can compute in vLLM's order."""


def match_engine_norm(model: torch.nn.Module, operands: torch.dtype) -> bool:
    """Make `model`'s final norm multiply by its weight rounded to `operands`, as vLLM 0.32's
    engine in that dtype does (vllm/ir/ops/layernorm.py `rms_norm`: the fp32 normalised values
    cast to the weight's dtype, times the weight, in that dtype); transformers multiplies by the
    fp32 master weight, so the FP32 head's bf16 operands were rounded from a different product.
    The gradient reaches the master weight through the cast. False (unchanged) when the model's
    final norm is not one of `ENGINE_ORDER_NORMS`. The norm's names and weights are unchanged."""
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    norm = getattr(base, "norm", None)
    if type(norm).__name__ not in ENGINE_ORDER_NORMS:
        return False

    def forward(x: Tensor) -> Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return (h.to(dtype).to(operands) * norm.weight.to(operands)).to(dtype)

    norm.forward = forward
    return True


def head_dtype(h: Tensor, fp32: bool) -> torch.dtype:
    """The dtype the head computes in: fp32 for the FP32 head; otherwise the body's compute dtype,
    i.e. autocast's when autocast is on (DDP's bf16 on GPU: the final RMSNorm multiplies bf16
    values by its fp32 master weight, so `h` arrives in fp32 although vLLM's bf16 engine computes
    its head in bf16), else the hidden states' own dtype."""
    if fp32:
        return torch.float32
    kind = h.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return h.dtype


def head_token_stats(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, *,
                     temperature: float = 1.0, fp32: bool = True, chunk: int = 1024,
                     operands: torch.dtype = torch.float32, accumulate: str = "addmm"
                     ) -> tuple[Tensor, Tensor]:
    """Logprobs of `targets` and entropies under the head (`weight`, `bias`) at `temperature`,
    for hidden states `h` of shape (..., H); both outputs have shape `h.shape[:-1]`, in fp32.

    `fp32`: the head runs in FP32 whatever the model's dtype (inputs, weight and bias are upcast
    once, outside the chunk loop); otherwise in the body's compute dtype (`head_dtype`).
    `chunk`: tokens per chunk (the logits held at once are chunk x vocabulary fp32 values).
    `operands` (FP32 head only): the dtype `h` and the weight are rounded to before the
    matmul; bfloat16 is vLLM 0.32's FP32 head (bf16 operands, fp32 accumulation and output).
    `accumulate`: how the backward sums the weight gradient (`ACCUMULATE`). The weight is cast
    to the operands' dtype inside, so its gradient comes back in its own dtype unrounded.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 token, got {chunk}")
    if accumulate not in ACCUMULATE:
        raise ValueError(f"accumulate {accumulate!r}: one of {', '.join(ACCUMULATE)}")
    dtype = operands if fp32 else head_dtype(h, fp32)
    shape = tuple(h.shape[:-1])
    flat = h.reshape(-1, h.shape[-1]).to(dtype)
    b = None if bias is None else bias.to(dtype)
    # the outputs are made in `shape`, not viewed into it: FSDP2 hooks a module's outputs, and
    # an in-place op on a returned view would drop its hook
    return _ChunkedHead.apply(flat, weight, b, targets.reshape(-1), temperature, chunk, shape,
                              fp32, accumulate)
