"""Worker for test_sharded_load.py, run under torchrun: the glue's `build_policy` with
`policy.sharding: fsdp2` on the tiny model. Each rank counts how often it read the weights
(`from_pretrained`), then computes the completion logprobs of fixed rows through the sharded
policy (every rank together) and gathers the full weights; rank 0 writes both and each rank's
count to argv's `--out`."""

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).parent))

from scalerl.trainer.config import PolicyConfig  # noqa: E402
from scalerl.trainer.sharding import gather_weights  # noqa: E402
from scalerl.training import build_policy  # noqa: E402

ROWS = torch.tensor([[5, 9, 11, 7, 3, 30, 12, 8], [6, 6, 21, 4, 2, 19, 0, 0]])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    reads = []
    real = AutoModelForCausalLM.from_pretrained
    AutoModelForCausalLM.from_pretrained = lambda *a, **k: reads.append(1) or real(*a, **k)
    accelerator = Accelerator(cpu=True)
    policy = build_policy(PolicyConfig(sharding="fsdp2", gradient_checkpointing=True),
                          args.model, accelerator)
    with torch.no_grad():
        logprobs, _ = policy(ROWS, (ROWS > 0).long(), torch.tensor([3, 3]),
                             torch.tensor([5, 3]))
    full = gather_weights(policy)
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, len(reads))
    if accelerator.is_main_process:
        torch.save({"reads": counts, "logprobs": logprobs, "weights": full}, args.out)


if __name__ == "__main__":
    main()
