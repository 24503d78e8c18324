"""Worker for test_stop_together.py, run under torchrun (gloo): rank 0 alone publishes weights
and validates, as in the training loop; when its generator fails there (a PublishError), every
rank must receive that failure from the same call, so that all stop and checkpoint together.

Each rank calls `loop.hand_weights` and `loop.validate_everywhere` with rank 0's rollout source
failing or not (argv: out_dir, "fail" or "ok") and writes what each call gave it to
`out_dir/rank<R>.json`: the class and message of what each raised, or None.
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


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
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
