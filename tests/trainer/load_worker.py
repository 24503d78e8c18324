"""Worker for test_sharded_load.py, run under torchrun: the glue's `build_policy` on the tiny
model, sharded (`--sharding fsdp2`) or whole and wrapped in DDP as the loop does (`none`). Each
rank counts how often it read the weights (`from_pretrained`) and computes the completion
logprobs of fixed rows; rank 0 writes every rank's count and logprobs, and the full weights
(gathered; with DDP rank 1's own), to argv's `--out`."""

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).parent))

from scalerl.trainer.config import PolicyConfig  # noqa: E402
from scalerl.trainer.policy import named_weights  # noqa: E402
from scalerl.trainer.sharding import gather_weights  # noqa: E402
from scalerl.training import build_policy  # noqa: E402

ROWS = torch.tensor([[5, 9, 11, 7, 3, 30, 12, 8], [6, 6, 21, 4, 2, 19, 0, 0]])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sharding", default="fsdp2", choices=["fsdp2", "none"])
    args = parser.parse_args()
    reads = []
    real = AutoModelForCausalLM.from_pretrained
    AutoModelForCausalLM.from_pretrained = lambda *a, **k: reads.append(1) or real(*a, **k)
    accelerator = Accelerator(cpu=True)
    policy = build_policy(PolicyConfig(sharding=args.sharding, gradient_checkpointing=True),
                          args.model, accelerator)
    if args.sharding == "none":
        policy = accelerator.prepare(policy)  # DDP, as the loop wraps it
    with torch.no_grad():
        logprobs, _ = policy(ROWS, (ROWS > 0).long(), torch.tensor([3, 3]),
                             torch.tensor([5, 3]))
    full = (gather_weights(policy) if args.sharding == "fsdp2" else
            dict(named_weights(accelerator.unwrap_model(policy))) if dist.get_rank() == 1
            else None)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, (len(reads), logprobs, full))
    if accelerator.is_main_process:
        torch.save({"reads": [r for r, _, _ in every], "logprobs": [lp for _, lp, _ in every],
                    "weights": every[0][2] if args.sharding == "fsdp2" else every[1][2]},
                   args.out)


if __name__ == "__main__":
    main()
