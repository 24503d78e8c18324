"""What the LoRA engine and server tests share: PEFT adapters of the tiny model with random
nonzero B (so each changes the policy), and the trainer side's log-probs of a rollout under one.

`peft_adapter(path, seed)` builds the tiny model wrapped by PEFT (rank 4, alpha 8, the default
targets), its A and B matrices drawn from `seed` (PEFT initialises B to zero: the base policy;
the same seed gives the same adapter);
`reference_logprobs` is what the trainer computes for a rollout's tokens under each token's
labelled version (a full forward of prompt + completion, log_softmax(logits / T)).
"""

from __future__ import annotations

import math

import torch

from scalerl.rollout.lora import LoraServing

SERVING = LoraServing(rank=4, alpha=8.0, max_loras=2)
A_BOUND = 0.1
"""A's entries are uniform in [-A_BOUND, A_BOUND] (about PEFT's own Kaiming-uniform bound for the
tiny model's fan-in of 128: 1/sqrt(128) ~ 0.09)."""
B_STD = 0.3
"""Standard deviation of the random B entries: large enough that an adapter moves the tiny
model's log-probs by ~0.1 or more (checked against the base in the tests)."""


def peft_adapter(model_path: str, seed: int):
    """The tiny model under a PEFT LoRA (SERVING's shape) whose B matrices are random
    (torch seed `seed`); fp32, eval mode."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=SERVING.rank, lora_alpha=SERVING.alpha,
                                            target_modules=list(SERVING.targets),
                                            lora_dropout=0.0))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # A too: PEFT draws it from the global RNG (not reproducible here)
        for name, param in model.named_parameters():
            if "lora_A" in name:
                param.copy_((torch.rand(param.shape, generator=gen) * 2 - 1) * A_BOUND)
            elif "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * B_STD)
    return model.eval()


def adapter_state(model) -> dict[str, torch.Tensor]:
    """The adapter's tensors by PEFT name (what a LoRA run publishes)."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model)


def completion_logprobs(model, prompt: tuple[int, ...], tokens: tuple[int, ...],
                        temperature: float) -> list[float]:
    """log p(token) of each completion token under `model` (a full forward, as the trainer)."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1: -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def mismatch(rollouts, models: dict, temperature: float) -> tuple[float, float, int]:
    """(mean k3 KL, max |dlogp|, tokens) between the engine's log-probs and the trainer's, each
    token scored by the model of its labelled version (`models[version]`)."""
    k3, worst, count = 0.0, 0.0, 0
    for r in rollouts:
        per_version = {v: completion_logprobs(models[v], r.prompt_token_ids, r.token_ids,
                                              temperature) for v in set(r.versions)}
        for i, (lp, version) in enumerate(zip(r.logprobs, r.versions, strict=True)):
            if lp is None:  # a forced-interruption phrase token: not sampled
                continue
            ratio = per_version[version][i] - lp
            k3 += math.exp(ratio) - 1 - ratio
            worst = max(worst, abs(ratio))
            count += 1
    return k3 / max(count, 1), worst, count
