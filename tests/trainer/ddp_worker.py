"""Worker for test_ddp.py, run under torchrun: one exact optimizer step on a fixed global batch.

Every rank builds the same tiny random Qwen2 and the same global batch; `train_step` shards the
rows over ranks, in micro-batches of argv[2] padded rows, or of at most argv[3] tokens packed
(varlen attention) when given. Rank 0 writes the updated weights and the step's loss to the path
in argv[1].
"""

import sys
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fake_groups, tiny_qwen2  # noqa: E402

from scalerl.trainer.batch import collate  # noqa: E402
from scalerl.trainer.losses import loss_kwargs  # noqa: E402
from scalerl.trainer.packing import use_varlen_attention  # noqa: E402
from scalerl.trainer.policy import PolicyModule  # noqa: E402
from scalerl.trainer.step import StepSettings, train_step  # noqa: E402


def main(out: str, micro: int, tokens: int | None = None) -> None:
    accelerator = Accelerator(cpu=True)
    model = PolicyModule(tiny_qwen2(seed=3))
    if tokens is not None:
        use_varlen_attention(model.model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    model, opt = accelerator.prepare(model, opt)
    batch = collate(fake_groups(n_prompts=3, n=4, seed=5), normalise="batch",
                    aggregation="prompt", pad_id=0)
    settings = StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                            micro_batch_size=micro, temperature=1.0, fp32_head=True,
                            max_grad_norm=None, micro_batch_tokens=tokens)
    stats = train_step(accelerator, model, opt, sched, batch, settings)
    if accelerator.is_main_process:
        weights = torch.nn.utils.parameters_to_vector(accelerator.unwrap_model(model).parameters())
        torch.save({"weights": weights.detach(), "loss": stats["loss"],
                    "world": accelerator.num_processes}, out)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
