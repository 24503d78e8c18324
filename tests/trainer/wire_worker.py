"""Worker for test_wire.py, run under torchrun (gloo): one step's groups reach every rank as the
training loop sends them (`loop.next_groups`: the groups without their tokens; `loop.global_batch`:
rank 0's collated tensors) and as they were sent before (every rollout pickled to every rank,
each rank collating its own). Each rank writes both paths' micro-batches of its own rows (the
rows `train_step` trains it on) and both filter reports to `out_dir/rank<R>.pt`.
"""

import dataclasses
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from scalerl.benches.control_data import recipe_groups
from scalerl.envs.base import Score
from scalerl.rollout.types import Budget
from scalerl.trainer import loop
from scalerl.trainer.batch import collate
from scalerl.trainer.config import TrainerConfig
from scalerl.trainer.filters import PromptRetirement
from scalerl.trainer.packing import token_micro_batches
from scalerl.trainer.waiting import broadcast_from_rank0, init_waiting


def step_groups():
    """12 prompts x 4 rollouts, with an error verdict, a truncated rollout and a zero-variance
    group among them (what the filters drop differently)."""
    budget = Budget(thinking=(200, 300), answer=64)
    groups = recipe_groups(12, 4, [budget, budget], max_model_len=1024, seed=3)
    groups[0][1] = dataclasses.replace(groups[0][1], score=Score(status="error", detail="boom"))
    groups[1][2] = dataclasses.replace(groups[1][2], finish_reason="truncated")
    groups[2] = [dataclasses.replace(r, score=Score(status="correct")) for r in groups[2]]
    return groups


class Source:
    def next_groups(self, version):
        return step_groups(), {"rollout/gen_s": 1.0}


def run_of(cfg, rank):
    return SimpleNamespace(cfg=cfg, step=0, source=Source() if rank == 0 else None,
                           tokenizer=SimpleNamespace(pad_token_id=0),
                           retirement=PromptRetirement(0.9, "last", enabled=True))


def mine(batch, rank, world, max_tokens=2048):
    chunks = token_micro_batches(batch.prompt_lens + batch.completion_lens, rank, world,
                                 max_tokens)
    return [dataclasses.asdict(batch.select(c)) if len(c) else {} for c in chunks]


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    init_waiting()
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = TrainerConfig()
    a = cfg.advantages

    run = run_of(cfg, rank)  # as the loop sends them now
    groups, _ = loop.next_groups(run)
    kept, report = loop.filter_groups(run, groups)
    new = loop.global_batch(run, kept, report)
    tokens_here = sum(len(r.token_ids) for g in groups for r in g)

    before = run_of(cfg, rank)  # as before: every rollout to every rank, each rank collates
    full = broadcast_from_rank0(step_groups() if rank == 0 else None)
    kept_b, report_b = loop.filter_groups(before, full)
    old = collate(kept_b, normalise=a.normalise, aggregation=cfg.loss.aggregation, pad_id=0,
                  eps=a.eps,
                  zero_rows=report_b.zero_variance_rollouts if a.std_scope == "all" else 0)
    torch.save({"new": mine(new, rank, world), "old": mine(old, rank, world),
                "report": (report.groups_in, report.zero_variance, report.retired,
                           report.truncated_dropped, report.error_excluded),
                "report_before": (report_b.groups_in, report_b.zero_variance, report_b.retired,
                                  report_b.truncated_dropped, report_b.error_excluded),
                "tokens_received": tokens_here, "rows": len(new)},
               out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(Path(sys.argv[1]))
