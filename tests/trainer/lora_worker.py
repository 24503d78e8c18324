"""Worker for test_lora_sharding.py, run under torchrun: AdamW steps of a LoRA policy (PEFT
adapters on a frozen base) on fixed global batches, whole (DDP through Accelerate) or sharded
by FSDP2 (`--shard`, with gradient checkpointing).

As the training glue does, rank 0 builds the tiny random Qwen2 with its weights and the other
ranks build it on the meta device and receive rank 0's (DDP's broadcast when it wraps the
module; `fill_from_rank0` under FSDP2). Rank 0 writes the losses, the adapter as published
(`gather_weights`: PEFT names) and the base weights after the steps to argv's `--out`.
"""

import argparse
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fake_groups, tiny_qwen2  # noqa: E402

from scalerl.trainer.batch import collate  # noqa: E402
from scalerl.trainer.lora import wrap_lora  # noqa: E402
from scalerl.trainer.lora_config import LoraConfig  # noqa: E402
from scalerl.trainer.losses import loss_kwargs  # noqa: E402
from scalerl.trainer.policy import PolicyModule, enable_gradient_checkpointing  # noqa: E402
from scalerl.trainer.sharding import fill_from_rank0, gather_weights, shard_policy  # noqa: E402
from scalerl.trainer.step import StepSettings, train_step  # noqa: E402

STEPS = 3
LORA = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))


def build(shard: bool, accelerator):
    main = accelerator.is_main_process
    if main:
        model = tiny_qwen2(seed=3)
    else:  # the glue's other ranks: no weights read
        with torch.device("meta"):
            model = type(tiny_qwen2(seed=3))(tiny_qwen2(seed=3).config)
    model = wrap_lora(model, LORA, seed=0)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    policy = PolicyModule(model, chunk_tokens=5)
    several = accelerator.num_processes > 1
    if shard:
        enable_gradient_checkpointing(model)
        full = model.state_dict() if main and several else None
        shard_policy(policy, accelerator.device, bf16=False, fp32_head=True)
        if several:
            fill_from_rank0(policy, accelerator.device, full)
    elif not main:
        policy.to_empty(device=accelerator.device)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.01, eps=1e-6)
    if not shard:
        policy, opt = accelerator.prepare(policy, opt)
    return policy, opt, base


def base_after(policy) -> dict:
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in policy.named_parameters():
        if not p.requires_grad:
            full = p.full_tensor() if isinstance(p, DTensor) else p
            out[name.removeprefix("module.").removeprefix("model.")] = full.detach().clone()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shard", action="store_true")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    policy, opt, base = build(args.shard, accelerator)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    settings = StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                            micro_batch_size=2, temperature=1.0, fp32_head=True,
                            max_grad_norm=None)
    losses, norms = [], []
    for step in range(STEPS):
        batch = collate(fake_groups(n_prompts=3, n=4, seed=10 + step), normalise="batch",
                        aggregation="prompt", pad_id=0)
        stats = train_step(accelerator, policy, opt, sched, batch, settings)
        losses.append(stats["loss"])
        norms.append(stats["grad_norm"])
    inner = policy if args.shard else accelerator.unwrap_model(policy)
    adapter = gather_weights(inner)
    after = base_after(inner)
    if accelerator.is_main_process:
        torch.save({"world": accelerator.num_processes, "losses": losses, "grad_norms": norms,
                    "adapter": adapter, "base_before": base, "base_after": after,
                    "trainable": sum(p.numel() for p in opt.param_groups[0]["params"])},
                   args.out)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
