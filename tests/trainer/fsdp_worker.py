"""Worker for test_fsdp.py, run under torchrun: AdamW steps on fixed global batches, with the
policy sharded by FSDP2 with gradient checkpointing (`--shard`) or whole, optionally
checkpointing or resuming.

Every rank builds the same tiny random Qwen2 (tied or untied LM head) and the same batches;
`train_step` shards the rows over ranks. Rank 0 writes the losses and the gathered weights of
each model to argv's `--out`. With `--save-at K` the run checkpoints after step K (the trainer's
own functions: gathered Hugging Face files, per-rank optimizer shards); `--resume` loads that
checkpoint (weights from its model files, optimizer shards) and runs the remaining steps.
"""

import argparse
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fake_groups, tiny_qwen2  # noqa: E402

from scalerl.trainer.batch import collate  # noqa: E402
from scalerl.trainer.checkpoint import (  # noqa: E402
    clear_optimizer_staging,
    load_sharded_optimizer,
    save_checkpoint,
    save_sharded_optimizer,
)
from scalerl.trainer.losses import loss_kwargs  # noqa: E402
from scalerl.trainer.policy import (  # noqa: E402
    PolicyModule,
    enable_gradient_checkpointing,
    hf_model,
    named_weights,
)
from scalerl.trainer.sharding import gather_weights, is_sharded, shard_policy  # noqa: E402
from scalerl.trainer.step import StepSettings, train_step  # noqa: E402
from scalerl.trainer.waiting import init_waiting, wait_for_rank0  # noqa: E402

STEPS = 3


def build(tied: bool, shard: bool, accelerator, ckpt: Path | None):
    model = tiny_qwen2(seed=3, tied=tied)
    if ckpt is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(ckpt)
    policy = PolicyModule(model, chunk_tokens=5)
    if shard:  # sharded runs also recompute activations: neither may change the step
        enable_gradient_checkpointing(model)
        shard_policy(policy, accelerator.device, bf16=False, fp32_head=True)
    # eps 1e-6, not 1e-8: with a tiny eps AdamW's first move is lr * sign(g) even where g is
    # roundoff (a true zero summed in another order), so the two layouts would differ by 2 lr
    # there on some CPUs (seen in CI). Gradients of the sizes that train are 1e3 times larger.
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-3, weight_decay=0.01, eps=1e-6)
    if not shard:
        policy, opt = accelerator.prepare(policy, opt)
    return policy, opt


def weights(accelerator, policy):
    if is_sharded(policy):
        return gather_weights(policy)
    return {n: t.clone() for n, t in named_weights(accelerator.unwrap_model(policy))}


def checkpoint(accelerator, policy, opt, run_dir: Path, step: int, name: str) -> None:
    """The trainer loop's sequence: stale staging cleared, wait, gather + shards, rank 0 writes."""
    if accelerator.is_main_process:
        clear_optimizer_staging(run_dir / name, step)
    wait_for_rank0()
    full = gather_weights(policy)
    save_sharded_optimizer(policy, opt, run_dir / name, step)
    if accelerator.is_main_process:
        save_checkpoint(run_dir / name, step, hf_model(policy), None, {}, state_dict=full)


def run_model(tied: bool, args, accelerator) -> dict:
    name = "tied" if tied else "untied"
    ckpt = None
    if args.resume:
        ckpt = Path(args.run_dir) / name / "checkpoints" / f"step-{args.save_at:06d}"
    policy, opt = build(tied, args.shard, accelerator, ckpt)
    first = 0
    if ckpt is not None:
        first = args.save_at
        load_sharded_optimizer(policy, opt, ckpt)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    settings = StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                            micro_batch_size=2, temperature=1.0, fp32_head=True,
                            max_grad_norm=0.5)  # binds: the norms here are 2-5
    losses, norms = [], []
    for step in range(first, STEPS):
        batch = collate(fake_groups(n_prompts=3, n=4, seed=10 + step), normalise="batch",
                        aggregation="prompt", pad_id=0)
        stats = train_step(accelerator, policy, opt, sched, batch, settings)
        losses.append(stats["loss"])
        norms.append(stats["grad_norm"])
        if args.save_at == step + 1 and not args.resume:
            checkpoint(accelerator, policy, opt, Path(args.run_dir), step + 1, name)
    return {"losses": losses, "grad_norms": norms, "weights": weights(accelerator, policy)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--resume", action="store_true",
                        help="continue from --run-dir's checkpoint of step --save-at")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    init_waiting()
    out = {"world": accelerator.num_processes,
           "tied": run_model(True, args, accelerator),
           "untied": run_model(False, args, accelerator)}
    if accelerator.is_main_process:
        torch.save(out, args.out)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
