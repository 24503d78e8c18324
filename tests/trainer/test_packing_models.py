"""Packed rows on every decoder the trainer may get: tiny Llama, Mistral (sliding window),
Qwen2 (full and sliding layers) and Qwen3 (GQA: 4 query heads, 2 key/value heads), fp32 on CPU.

Each packed row's logprobs and entropies equal those of the row run alone through the untouched
model, and the gradients equal the padded rows'; boundaries that let the rows see each other give
other numbers (so the comparison can fail). A rank short of micro-batches trains a 2-token dummy
that changes nothing. A few optimizer steps with packing on a tiny Llama loaded as `scalerl
train` loads it equal the same steps on padded rows. flash-attn is chosen only when it imports.
The CUDA path's call of torch's varlen_attn (no CPU kernel) is checked against that function's
documented semantics, written out here.
"""

import dataclasses
import sys

import pytest
import torch
from accelerate import Accelerator
from conftest import VOCAB
from test_packing import batch_of, groups_of_lengths, settings

from scalerl.trainer.batch import TrainBatch
from scalerl.trainer.config import PolicyConfig
from scalerl.trainer.packing import (
    flash_attention_unusable,
    pack,
    packed_attention,
    use_varlen_attention,
)
from scalerl.trainer.policy import PolicyModule, hf_model, packed_token_stats, token_stats
from scalerl.trainer.step import _dummy, _forward, _micro_loss, train_step

LENGTHS = [(3, 4), (9, 14), (2, 2), (5, 20)]
"""(prompt, completion) lengths: rows of 3 to 25 tokens, longer than the sliding window."""
WINDOW = 6


def tiny(arch: str, seed: int = 0):
    """A 2-layer decoder of `arch`: hidden 64, 4 query heads and 2 key/value heads of 16."""
    import transformers

    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=256)
    name, extra = {
        "llama": ("Llama", {}),
        "mistral": ("Mistral", {"sliding_window": WINDOW}),
        "qwen2": ("Qwen2", {}),
        "qwen2-sliding": ("Qwen2", {"use_sliding_window": True, "sliding_window": WINDOW,
                                    "max_window_layers": 1}),  # layer 0 full, layer 1 sliding
        "qwen3": ("Qwen3", {}),
    }[arch]
    config = getattr(transformers, f"{name}Config")(**common, **extra)
    torch.manual_seed(seed)
    return getattr(transformers, f"{name}ForCausalLM")(config)


def alone(model, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row run by itself (no padding, no mask), on the (B, T) completion grid."""
    logprobs = torch.zeros(batch.mask.shape)
    entropy = torch.zeros(batch.mask.shape)
    for i in range(len(batch)):
        row = batch.select(torch.tensor([i]))
        n = int(row.prompt_lens + row.completion_lens)
        stats = token_stats(model, row.input_ids[:, :n], None, row.prompt_lens,
                            row.completion_lens)
        logprobs[i, :stats.logprobs.shape[1]] = stats.logprobs[0]
        entropy[i, :stats.entropy.shape[1]] = stats.entropy[0]
    return logprobs, entropy


ARCHS = ["llama", "mistral", "qwen2", "qwen2-sliding", "qwen3"]


@pytest.mark.parametrize("arch", ARCHS)
def test_packed_rows_give_each_row_its_own_numbers_on_every_decoder(arch):
    batch = batch_of(groups_of_lengths(LENGTHS, seed=1))
    model = tiny(arch)
    with torch.no_grad():
        lp, ent = alone(model, batch)  # the model as loaded: SDPA, one row at a time
    use_varlen_attention(model)
    p = pack(batch.input_ids, batch.prompt_lens + batch.completion_lens)
    packed = packed_token_stats(model, p, batch.prompt_lens, batch.completion_lens)
    m = batch.mask
    assert (packed.logprobs * m - lp * m).abs().max() <= 1e-5
    assert (packed.entropy * m - ent * m).abs().max() <= 1e-5
    weights = torch.randn(m.shape, generator=torch.Generator().manual_seed(0))
    (packed.logprobs * m * weights).sum().backward()
    grads = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
    model.zero_grad()
    padded = token_stats(model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                         batch.completion_lens)  # SDPA with its padding (and window) mask
    (padded.logprobs * m * weights).sum().backward()
    pgrads = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
    assert (grads - pgrads).abs().max() <= 1e-5 * pgrads.abs().max()
    assert pgrads.abs().max() > 1e-2
    # the same rows as one sequence (each sees the ones before it): other numbers
    n = p.bounds[-1]
    one = dataclasses.replace(p, cu_seqlens=torch.tensor([0, n], dtype=torch.int32),
                              bounds=(0, n), max_length=n)
    with torch.no_grad():
        mixed = packed_token_stats(model, one, batch.prompt_lens, batch.completion_lens)
    assert (mixed.logprobs * m - lp * m)[1:].abs().max() > 1e-3


def test_a_rank_without_rows_trains_a_two_token_dummy_that_changes_nothing():
    batch = batch_of(groups_of_lengths(LENGTHS, seed=1))
    model = PolicyModule(tiny("llama"))
    use_varlen_attention(model.model)
    dummy = _dummy(batch)
    assert dummy.input_ids.shape == (1, 2) and dummy.num_tokens == 2
    for s in (settings(micro_batch_tokens=64), settings(micro_batch_size=2)):
        loss, sums = _micro_loss(model, dummy, s)
        loss.backward()
        grads = [q.grad for q in model.parameters()]
        assert loss.item() == 0 and float(sums["tokens"]) == 0
        assert all(g is not None and not g.any() for g in grads)  # every weight: a zero grad
        model.zero_grad(set_to_none=True)


def llama_dir(tmp_path) -> str:
    path = tmp_path / "tiny-llama"
    tiny("llama", seed=4).save_pretrained(path)
    return str(path)


def steps(path: str, batches, s) -> tuple[torch.Tensor, list[dict], list[float]]:
    """The trainer's own set-up (scalerl.training.build_policy, then the loop's switch to
    varlen attention when packing) and `train_step` on each batch with AdamW; also the largest
    gap between the step's forward and the padded rows' logprobs before each step."""
    from scalerl.training import build_policy

    accelerator = Accelerator(cpu=True)
    packed = s.micro_batch_tokens is not None
    model = build_policy(PolicyConfig(model="tiny-llama", dtype="float32"), path, accelerator,
                         packed=packed)
    if packed:
        use_varlen_attention(hf_model(model))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    model, opt = accelerator.prepare(model, opt)
    stats, gaps = [], []
    for batch in batches:
        with torch.no_grad():
            mine, _ = _forward(model, batch, s)
            padded, _ = _forward(model, batch, settings(micro_batch_size=len(batch)))
        gaps.append(float(((mine - padded) * batch.mask).abs().max()))
        stats.append(train_step(accelerator, model, opt, sched, batch, s))
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach(), stats, gaps


def test_a_few_packed_steps_on_a_tiny_llama_are_the_padded_steps(tmp_path):
    path = llama_dir(tmp_path)
    batches = [batch_of(groups_of_lengths(LENGTHS, seed=k)) for k in range(3)]
    w, packed, gaps = steps(path, batches, settings(micro_batch_tokens=48))  # 2-3 micro-batches
    base_w, padded, _ = steps(path, batches, settings(micro_batch_size=len(batches[0])))
    assert all(gap <= 1e-5 for gap in gaps), gaps
    for a, b in zip(packed, padded, strict=True):
        assert torch.isfinite(torch.tensor(a["loss"])) and a["loss"] != 0
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["train_tokens"] == b["train_tokens"]
    assert packed[0]["loss"] != packed[2]["loss"]  # the weights moved between steps
    torch.testing.assert_close(w, base_w, rtol=1e-4, atol=1e-5)


def test_flash_attention_is_chosen_only_when_it_really_imports(tmp_path, monkeypatch, capsys):
    # a flash_attn that is found but does not import (a wheel built for another torch)
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text(
        "raise ImportError('flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    assert "ImportError: flash_attn_2_cuda.so: undefined symbol" in flash_attention_unusable()
    assert packed_attention(torch.device("cuda")) is None
    assert "flash-attn is not usable (ImportError: " in capsys.readouterr().err
    assert packed_attention(torch.device("cpu")) is None  # no warning off the GPU
    assert capsys.readouterr().err == ""


def varlen_attn_as_documented(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *,
                              scale=None, window_size=(-1, -1), enable_gqa=False, **rest):
    """torch 2.13's `varlen_attn` as its docstring states it (its kernel is CUDA only): (T, H, D)
    tensors, each sequence attending within itself; key j seen from query i when
    i - left <= j <= i + right (-1: no bound); query head h reads key head h // (Hq / Hkv)."""
    assert torch.equal(cu_seq_q, cu_seq_k) and max_q == max_k and not rest
    assert enable_gqa == (query.shape[1] != key.shape[1])
    groups = query.shape[1] // key.shape[1]
    left, right = window_size
    out = torch.empty_like(query)
    for a, b in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
        i = torch.arange(b - a)
        seen = torch.ones(b - a, b - a, dtype=torch.bool)
        if right >= 0:
            seen &= i[None, :] <= i[:, None] + right
        if left >= 0:
            seen &= i[None, :] >= i[:, None] - left
        k, v = (t[a:b].repeat_interleave(groups, dim=1) for t in (key, value))
        scores = torch.einsum("qhd,khd->hqk", query[a:b], k) * (scale or query.shape[-1] ** -0.5)
        weights = scores.masked_fill(~seen, float("-inf")).softmax(-1)
        out[a:b] = torch.einsum("hqk,khd->qhd", weights, v)
    return out


@pytest.mark.parametrize("arch", ["mistral", "qwen3"])
def test_the_cuda_path_hands_varlen_attn_the_rows_as_it_documents_them(arch, monkeypatch):
    # the CUDA-only kernel stood in for by its documented semantics: the layout (T, H, D), the
    # window (W - 1, 0), GQA and the scale the trainer passes must give each row's own numbers
    import scalerl.trainer.packing as packing

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["window_size"])
        return varlen_attn_as_documented(*args, **kwargs)

    monkeypatch.setattr("torch.nn.attention.varlen.varlen_attn", spy)
    monkeypatch.setattr(packing, "_torch_varlen_fits", lambda query: True)
    batch = batch_of(groups_of_lengths(LENGTHS, seed=1))
    model = tiny(arch)
    with torch.no_grad():
        lp, _ = alone(model, batch)
        use_varlen_attention(model)
        p = pack(batch.input_ids, batch.prompt_lens + batch.completion_lens)
        packed = packed_token_stats(model, p, batch.prompt_lens, batch.completion_lens)
    assert calls == [(WINDOW - 1, 0) if arch == "mistral" else (-1, 0)] * 2  # once per layer
    assert (packed.logprobs * batch.mask - lp * batch.mask).abs().max() <= 1e-5


def test_fp32_weights_under_autocast_reach_varlen_attn_in_the_autocast_dtype(monkeypatch):
    # the trainer's GPU default (fp32 master weights, bf16 autocast): RoPE's fp32 cos/sin make
    # q and k fp32, which the flash kernel refuses; they must arrive in bf16, as SDPA's would
    import scalerl.trainer.packing as packing

    dtypes = []

    def spy(query, key, value, *args, **kwargs):
        dtypes.append((query.dtype, key.dtype, value.dtype))
        return varlen_attn_as_documented(query, key, value, *args, **kwargs)

    monkeypatch.setattr("torch.nn.attention.varlen.varlen_attn", spy)
    monkeypatch.setattr(packing, "_torch_varlen_fits", lambda q: q.dtype == torch.bfloat16)
    batch = batch_of(groups_of_lengths(LENGTHS, seed=1))
    model = tiny("llama")
    use_varlen_attention(model)
    p = pack(batch.input_ids, batch.prompt_lens + batch.completion_lens)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        packed = packed_token_stats(model, p, batch.prompt_lens, batch.completion_lens)
        padded = token_stats(model, batch.input_ids, batch.attention_mask, batch.prompt_lens,
                             batch.completion_lens)
    assert dtypes == [(torch.bfloat16,) * 3] * 2
    gap = ((packed.logprobs - padded.logprobs) * batch.mask).abs().max()
    assert gap <= 1e-2, gap  # bf16 roundoff of two kernels (1.3e-3 here); logprobs are ~ -4
