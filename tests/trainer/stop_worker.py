"""Worker for test_stop_together.py, run under torchrun (gloo): rank 0 alone publishes weights
and validates, as in the training loop; when its generator fails there (a PublishError), every
rank must receive that failure from the same call, so that all stop and checkpoint together.

Each rank calls `loop.hand_weights` and `loop.validate_everywhere` with rank 0's rollout source
failing or not (argv: out_dir, "fail" or "ok") and writes what each call gave it to
`out_dir/rank<R>.json`: the class and message of what each raised, or None.

Mode "abandon": after one real optimizer step (DDP over gloo, AdamW), a second `train_step` in
6 micro-batches where only rank 1 asks to stop, from its 2nd micro-batch on: each rank writes
what it raised and whether its weights, optimizer state and schedule are still those of step 1.
"""

import contextlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from scalerl.trainer import loop
from scalerl.trainer.config import TrainerConfig, ValConfig
from scalerl.trainer.publish import PublishError
from scalerl.trainer.waiting import init_waiting


class Source:
    """Rank 0's source: publishes at once on `on_step` (PipelineRL's way) and before validating."""

    def __init__(self, fail: bool):
        self.fail = fail

    def wants_weights(self) -> bool:
        return True

    def on_step(self, version, weights):
        if self.fail:
            raise PublishError(f"failed sending weights version {version}: reload timed out")

    def ensure_synced(self):
        if self.fail:
            raise PublishError("failed sending weights version 3 before validating")
        return {}


def raised(call) -> dict | None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - what each rank saw is the result
        return {"type": type(exc).__name__, "msg": str(exc)}
    return None


def abandon(out: Path) -> None:
    """Rank 1 alone asks to stop mid-step: both ranks abandon the step at the same micro-batch,
    with nothing updated."""
    from accelerate import Accelerator

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import fake_groups, tiny_qwen2

    from scalerl.trainer.batch import collate
    from scalerl.trainer.losses import loss_kwargs
    from scalerl.trainer.policy import PolicyModule
    from scalerl.trainer.step import StepSettings, train_step

    accelerator = Accelerator(cpu=True)
    init_waiting()
    model = PolicyModule(tiny_qwen2(seed=3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 10)
    model, opt = accelerator.prepare(model, opt)
    batch = collate(fake_groups(n_prompts=3, n=4, seed=5), normalise="batch",
                    aggregation="prompt", pad_id=0)
    settings = StepSettings(loss="cispo", loss_kwargs=loss_kwargs("cispo", {}),
                            micro_batch_size=1, temperature=1.0, fp32_head=True,
                            max_grad_norm=1.0)
    train_step(accelerator, model, opt, sched, batch, settings)
    weights = [p.detach().clone() for p in model.parameters()]
    moments = [v.clone() for st in opt.optimizer.state.values() for v in st.values()]
    lr = sched.get_last_lr()
    asked = []

    def stop() -> bool:
        asked.append(1)
        return dist.get_rank() == 1 and len(asked) >= 2

    result = raised(lambda: train_step(accelerator, model, opt, sched, batch, settings, stop))
    result = result or {"type": None, "msg": None}
    after = [v for st in opt.optimizer.state.values() for v in st.values()]
    result |= {"asked": len(asked), "lr_same": sched.get_last_lr() == lr,
               "weights_same": all(torch.equal(a, b) for a, b in
                                   zip(weights, model.parameters(), strict=True)),
               "optimizer_same": all(torch.equal(a, b) for a, b in
                                     zip(moments, after, strict=True)) and len(after) > 0,
               "grads_cleared": all(p.grad is None for p in model.parameters())}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    os._exit(0)


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "abandon":
        return abandon(out)
    dist.init_process_group("gloo")
    init_waiting()
    rank = dist.get_rank()
    source = Source(mode == "fail") if rank == 0 else None
    clock = SimpleNamespace(apart=contextlib.nullcontext, totals=dict)
    run = SimpleNamespace(model=torch.nn.Linear(2, 2), source=source, step=3, tasks={},
                          cfg=TrainerConfig(steps=10, val=ValConfig(every=3)), clock=clock,
                          validations=[], writer=None, generator=None, validator=None)
    result = {"hand_weights": raised(lambda: loop.hand_weights(run)),
              "validate": raised(lambda: loop.validate_everywhere(run))}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    # Exit without tearing the gloo groups down: on these machines about one run in four then
    # aborted in a destructor ("terminate called without an active exception") after both
    # ranks had written their results, whether or not destroy_process_group() was called.
    os._exit(0)


if __name__ == "__main__":
    main()
