"""`scalerl bench control`'s ranks, run under `torchrun --nproc_per_node 2` (gloo): the step's
hand-over from rank 0 to every rank, before (every rollout pickled to every rank, each rank
collating) and now (trainer/wire.py), alternated `repeats` times. Rank 0 writes the best of each
(the slowest rank's seconds from a barrier until it holds the batch) as JSON to argv[4] (argv: the
config, its `--set` overrides as a JSON list, the repeats, the output file)."""

from __future__ import annotations

import json
import pickle
import sys
import time

import torch
import torch.distributed as dist

from scalerl.benches.control import step_groups
from scalerl.benches.control_data import collate_lists
from scalerl.trainer.batch import collate
from scalerl.trainer.waiting import broadcast_from_rank0, init_waiting
from scalerl.trainer.wire import light_groups, share_batch


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def main(config: str, sets: list[str], repeats: int, out: str) -> None:
    dist.init_process_group("gloo")
    init_waiting()
    rank = dist.get_rank()
    groups, cfg = step_groups(config, sets) if rank == 0 else (None, None)
    cfg = broadcast_from_rank0(cfg)
    kwargs = {"normalise": cfg.advantages.normalise, "aggregation": cfg.loss.aggregation,
              "pad_id": 0}
    rewards = cfg.advantages.rewards
    rows = 0 if groups is None else sum(map(len, groups))
    rows = int(broadcast_from_rank0(rows))
    best = {"handover_s": float("inf"), "handover_before_s": float("inf"),
            "pickle_send_s": float("inf")}

    def before() -> None:
        t = time.perf_counter()
        got = broadcast_from_rank0(groups)
        best["pickle_send_s"] = min(best["pickle_send_s"], slowest(
            time.perf_counter() - t if rank == 0 else 0.0))
        collate_lists([rewards.assign(g) for g in got], **kwargs)

    def now() -> None:
        got = broadcast_from_rank0(light_groups(groups) if rank == 0 else None)
        kept = [rewards.assign(g) for g in got]  # the filters' stand-in: every group kept
        batch = collate([rewards.assign(g) for g in groups], **kwargs) if rank == 0 else None
        share_batch(batch, rows=sum(map(len, kept)))

    for i in range(repeats):
        for name, path in (("handover_before_s", before), ("handover_s", now))[::1 - 2 * (i % 2)]:
            dist.barrier()
            t = time.perf_counter()
            path()
            best[name] = min(best[name], slowest(time.perf_counter() - t))
    if rank == 0:
        batch = collate([rewards.assign(g) for g in groups], **kwargs)
        best["pickled_mb"] = len(pickle.dumps(groups, protocol=pickle.HIGHEST_PROTOCOL)) / 1e6
        best["light_mb"] = len(pickle.dumps(light_groups(groups),
                                            protocol=pickle.HIGHEST_PROTOCOL)) / 1e6
        best["tensor_mb"] = sum(t.numel() * t.element_size()
                                for t in vars(batch).values()) / 1e6
        with open(out, "w") as f:
            json.dump(best, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
