"""The dry run's memory model against a GPU's own allocator, for scripts/gpu-check.

`calibration_rows` trains a random-initialised Qwen3 of Qwen3-8B's layer shapes with as many
layers as the model says fit one GPU, then with half as many, as the trainer does it (FSDP2 on
one rank: fp32 master weights and AdamW, bf16 layers, the FP32 head with bf16 operands,
gradient checkpointing, one row of `micro_batch_tokens` tokens), and reads
`torch.cuda.max_memory_allocated` by part beside scalerl/planning/sizing.py's prediction for the
same shapes; the two depths give the bytes per layer, measured and predicted, and both are
extrapolated to the full 36 layers. `head_rows` measures the FP32 head's peak with its backward
summing the weight gradient by `torch.addmm(..., out_dtype=float32)` and by the former bf16
matmul and copy. Off CUDA nothing is measured (the rows say n/a): the CPU run only exercises
the code on tiny shapes. Prints nothing; returns markdown rows.
"""

from __future__ import annotations

import tempfile

import torch

QWEN3_8B = dict(hidden=4096, intermediate=12288, heads=32, kv_heads=8, head_dim=128,
                vocab=151936, layers=36)
"""Qwen/Qwen3-8B's config.json widths (tests/published_configs.py)."""
TINY = dict(hidden=64, intermediate=128, heads=2, kv_heads=1, head_dim=32, vocab=512, layers=4)
FIT_SHARE = 0.85
"""Share of the GPU the calibration model may be predicted to use (room for the model's
errors: this is what is being checked)."""
STEP_PARTS = ("gathered", "activations", "logits", "rmsnorm_fp32", "head_copies",
              "reduce_scatter", "gradients")
"""The predicted parts a step holds above the weights and AdamW's state (gradients appear in
the backward)."""


def qwen3_config(dims: dict, layers: int):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=dims["vocab"], hidden_size=dims["hidden"],
                       intermediate_size=dims["intermediate"], num_hidden_layers=layers,
                       num_attention_heads=dims["heads"], num_key_value_heads=dims["kv_heads"],
                       head_dim=dims["head_dim"], tie_word_embeddings=False,
                       max_position_embeddings=40960, rms_norm_eps=1e-6)


def predicted(dims: dict, layers: int, tokens: int) -> dict[str, int]:
    """sizing.py's trainer parts for this model on one FSDP2 rank (the recipe's settings)."""
    from scalerl.planning.sizing import TrainerLayout, model_shape, trainer_memory

    with tempfile.TemporaryDirectory() as d:
        qwen3_config(dims, layers).save_pretrained(d)
        shape = model_shape(d)
    layout = TrainerLayout(ranks=1, sharded=True, dtype="auto", fp32_head=True,
                           checkpointing=True, micro_tokens=tokens, logit_chunk_tokens=1024,
                           head_operands="bfloat16")
    return trainer_memory(shape, layout)


def layers_that_fit(dims: dict, tokens: int, gpu_bytes: int) -> int:
    """The most layers (at most the model's) whose predicted peak is FIT_SHARE of the GPU."""
    fit = 1
    for n in range(1, dims["layers"] + 1):
        if sum(predicted(dims, n, tokens).values()) > FIT_SHARE * gpu_bytes:
            break
        fit = n
    return fit


def measured(dims: dict, layers: int, tokens: int, device: torch.device) -> dict[str, int]:
    """Bytes by part of two trainer steps (the second has AdamW's state): {} off CUDA, {"oom":
    1} when the GPU ran out (the model underestimated)."""
    import gc

    try:
        return _measured(dims, layers, tokens, device)
    except torch.OutOfMemoryError:
        out = {"oom": 1}
    gc.collect()  # the failed step's tensors, once its traceback is gone
    torch.cuda.empty_cache()
    return out


def _measured(dims: dict, layers: int, tokens: int, device: torch.device) -> dict[str, int]:
    from transformers import Qwen3ForCausalLM

    from scalerl.trainer.policy import PolicyModule, enable_gradient_checkpointing
    from scalerl.trainer.sharding import shard_policy

    cuda = device.type == "cuda"
    used = torch.cuda.memory_allocated if cuda else (lambda: 0)
    torch.manual_seed(0)
    base = used()
    with torch.device(device):
        model = Qwen3ForCausalLM(qwen3_config(dims, layers))
    enable_gradient_checkpointing(model)
    policy = shard_policy(PolicyModule(model, head_operands="bfloat16"), device, bf16=cuda,
                          fp32_head=True)
    out = {"weights": used() - base}
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    ids = torch.randint(0, dims["vocab"], (1, tokens), device=device)
    prompt = torch.tensor([tokens // 8], device=device)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        before = used()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        lp, _ = policy(ids, torch.ones_like(ids), prompt, tokens - prompt, fp32_head=True)
        lp.float().mean().backward()
        step = (torch.cuda.max_memory_allocated() - before) if cuda else 0
        grads = used() - before
        opt.step()
        out.setdefault("optimizer", used() - before - grads)  # AdamW's state, made at step 1
        out |= {"gradients": grads, "step": step}  # step 2: the state is there
    if cuda:
        out["fragmentation"] = torch.cuda.max_memory_reserved() - torch.cuda.max_memory_allocated()
    del policy, model, opt
    if cuda:
        torch.cuda.empty_cache()
    return out if cuda else {}


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**30:.2f}"


def calibration_rows(dims: dict, tokens: int, device: torch.device, gpu_bytes: int
                     ) -> list[str]:
    """Markdown rows: each part measured and predicted at N and N/2 layers, per layer, and the
    whole model extrapolated from the per-layer figures."""
    deep = layers_that_fit(dims, tokens, gpu_bytes) if gpu_bytes else min(2, dims["layers"])
    shallow = max(1, deep // 2)
    runs = {n: (measured(dims, n, tokens, device), predicted(dims, n, tokens))
            for n in dict.fromkeys((deep, shallow))}
    oom = [n for n, (got, _) in runs.items() if got.get("oom")]
    runs = {n: ({} if n in oom else got, want) for n, (got, want) in runs.items()}
    rows = [f"memory by part, GiB: a random Qwen3 {dims['hidden']} wide, {dims['layers']} layers "
            f"in full, one FSDP2 rank, {tokens} tokens (measured: "
            f"torch.cuda.max_memory_allocated)"
            + "".join(f"; OUT OF MEMORY at {n} layers" for n in oom),
            f"| part | {deep} layers measured | predicted | {shallow} layers measured | "
            "predicted | per layer measured | predicted |", "|---|---|---|---|---|---|---|"]
    parts = {"weights": ("weights",), "gradients": ("gradients",),
             "optimizer": ("optimizer",), "step": STEP_PARTS,
             "fragmentation": ("fragmentation",)}
    per_layer = {}
    for part, names in parts.items():
        cells, values = [], {}
        for n, (got, model) in runs.items():
            want = sum(model.get(k, 0) for k in names)
            values[n] = (got.get(part), want)
            cells += [_gib(got.get(part)), _gib(want)]
        if shallow == deep:
            cells += cells
        span = max(1, deep - shallow)
        (m1, p1), (m2, p2) = values[deep], values[shallow]
        per_layer[part] = (None if m1 is None else (m1 - m2) / span, (p1 - p2) / span)
        rows.append(f"| {part} | " + " | ".join(cells) + f" | {_gib(per_layer[part][0])} | "
                    f"{_gib(per_layer[part][1])} |")
    full = dims["layers"] - deep
    got = sum(runs[deep][0].values()) if runs[deep][0] else None
    want = sum(runs[deep][1].get(k, 0) for names in parts.values() for k in names)
    slope_m = sum(m for m, _ in per_layer.values() if m is not None)
    slope_p = sum(p for _, p in per_layer.values())
    rows.append(f"| all {dims['layers']} layers, extrapolated | "
                f"{_gib(None if got is None else got + full * slope_m)} | "
                f"{_gib(int(want + full * slope_p))} | | | | |")
    return rows


def head_rows(dims: dict, tokens: int, device: torch.device) -> list[str]:
    """The FP32 head's peak over its inputs (bf16 hidden states, fp32 weight) with each way of
    summing the weight gradient; the predicted peak: its bf16 weight, its logits chunk's three
    fp32 copies, its inputs and the fp32 gradient."""
    from scalerl.trainer import head
    from scalerl.trainer.head import ACCUMULATE, head_token_stats

    cuda = device.type == "cuda"
    vh = dims["vocab"] * dims["hidden"]
    want = vh * 2 + 3 * 1024 * dims["vocab"] * 4 + tokens * dims["hidden"] * (4 + 2) + vh * 4
    rows = [f"FP32 head ({dims['vocab']} x {dims['hidden']}, {tokens} tokens, bf16 operands), "
            "peak GiB above its inputs:", "| backward sums dW by | measured | predicted |",
            "|---|---|---|"]
    for how in ACCUMULATE:
        g = torch.Generator(device=device).manual_seed(0)
        h = torch.randn(tokens, dims["hidden"], generator=g, device=device,
                        dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(dims["vocab"], dims["hidden"], generator=g, device=device) * 0.02
             ).requires_grad_()
        targets = torch.randint(0, dims["vocab"], (tokens,), generator=g, device=device)
        base = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            lp, _ = head_token_stats(h, w, None, targets, operands=torch.bfloat16,
                                     accumulate=how)
            lp.sum().backward()
            got = _gib(torch.cuda.max_memory_allocated() - base) if cuda else "n/a"
            if how == "addmm" and head._ADDMM_REFUSED:
                got += " (addmm.dtype_out refused an fp32 self: torch.mm(out_dtype) + add)"
        except RuntimeError as e:  # the kernel's own refusal is the finding
            got = f"failed: {str(e).splitlines()[0][:120]}"
        rows.append(f"| {how} | {got} | {_gib(want + (vh * 6 if how == 'matmul' else 0))} |")
        del h, w, targets
    return rows
