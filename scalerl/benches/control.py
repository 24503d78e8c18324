"""`scalerl bench control`: rank 0's per-step control-plane work at a recipe's batch, on CPU.

The step's rollouts are made up at the recipe's scale (`--config`, default the `scalerl` recipe:
48 prompts x 16 rollouts, thinking budgets of 10,240-12,288 plus 2,048 answer tokens, about 5M
completion tokens; scalerl/benches/control_data.py). Timed, each beside the path it replaced:

- the hand-over to the trainer ranks under a real `torchrun --nproc_per_node 2` on gloo, from a
  barrier until every rank holds the step's batch (the slowest rank): before, every rollout
  pickled to every rank and each rank collating it; now, the groups without their tokens and
  rank 0's collated tensors (trainer/wire.py);
- `collate` alone: flat arrays (trainer/columns.py) against padded Python lists;
- decoding vLLM's JSON replies (the per-token logprob entries) on rank 0's generator thread,
  timed on `--decode-sample` replies and scaled to the step's tokens (not moved: it runs
  while the engines generate, spread over the step).

Scoring is not timed here (`scalerl bench verify` and `bench code` time the verifiers, which
run in worker processes). Each path is run `--repeats` times alternated; the best of each is
printed with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalerl.benches import positive_int

HELP = ("rank 0's per-step hand-over to the trainer ranks (2-rank gloo torchrun), collate and "
        "reply decoding at a recipe's batch vs the paths they replaced")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="scalerl", help="recipe or YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (repeatable), e.g. offpolicy.prompts_per_step=8")
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="runs of each path, alternated (default 2); the best is kept")
    parser.add_argument("--decode-sample", type=positive_int, default=48,
                        help="vLLM replies decoded to time the decoding (default 48)")


def step_groups(config: str, sets: list[str], seed: int = 0):
    """The made-up step of `config`'s recipe (with the `--set` overrides), and its config."""
    from scalerl.benches.control_data import recipe_groups
    from scalerl.config import load_config, validate

    cfg = validate(load_config(config, sets))
    o = cfg.offpolicy
    budgets = [t.budget for t in cfg.tasks]
    return recipe_groups(o.prompts_per_step, o.rollouts_per_prompt, budgets,
                         cfg.engine.max_model_len, seed), cfg


def decoding(groups, sample: int) -> dict[str, float]:
    """Seconds to decode the step's replies (json.loads and the generator's parse), scaled."""
    from scalerl.benches.control_data import vllm_reply
    from scalerl.rollout.server_generator import ServerGenerator
    from scalerl.rollout.server_pool import Server

    rollouts = [r for g in groups for r in g]
    picked = rollouts[:: max(1, len(rollouts) // sample)][:sample]
    replies = [vllm_reply(r) for r in picked]
    server = Server("http://bench", 0)
    t = time.perf_counter()
    for text in replies:
        ServerGenerator._parsed(json.loads(text), server)
    took = time.perf_counter() - t
    tokens = sum(len(r.token_ids) for r in picked)
    step_tokens = sum(len(r.token_ids) for r in rollouts)
    return {"decode_s": took * step_tokens / tokens, "decode_tokens_per_s": tokens / took}


def collating(groups, cfg) -> dict[str, float]:
    from scalerl.benches.control_data import collate_lists
    from scalerl.trainer.batch import collate

    a = cfg.advantages
    kwargs = {"normalise": a.normalise, "aggregation": cfg.loss.aggregation, "pad_id": 0}
    kept = [cfg.advantages.rewards.assign(g) for g in groups]
    t = time.perf_counter()
    collate(kept, **kwargs)
    new = time.perf_counter() - t
    t = time.perf_counter()
    collate_lists(kept, **kwargs)
    return {"collate_s": new, "collate_before_s": time.perf_counter() - t}


def ranks(config: str, sets: list[str], repeats: int) -> dict[str, float]:
    """The hand-over under `torchrun --nproc_per_node 2` (gloo); rank 0's figures."""
    torchrun = Path(sys.executable).parent / "torchrun"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ranks.json"
        proc = subprocess.run(
            [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m",
             "scalerl.benches.control_ranks", config, json.dumps(sets), str(repeats),
             str(out)],
            env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the 2-rank torchrun failed: {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def run(args: argparse.Namespace) -> int:
    groups, cfg = step_groups(args.config, args.set)
    tokens = sum(len(r.token_ids) for g in groups for r in g)
    r = {"rollouts": sum(map(len, groups)), "completion_tokens": tokens}
    r |= decoding(groups, args.decode_sample)
    r |= collating(groups, cfg)
    del groups
    r |= ranks(args.config, args.set, args.repeats)
    r["handover_ratio"] = r["handover_before_s"] / r["handover_s"]
    r["collate_ratio"] = r["collate_before_s"] / r["collate_s"]
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"one step of {args.config}: {r['rollouts']} rollouts, {tokens:,} completion tokens")
    print(f"  hand-over to 2 gloo ranks (slowest rank): {r['handover_s']:.2f} s now, "
          f"{r['handover_before_s']:.2f} s before: x{r['handover_ratio']:.1f}")
    print(f"    before: pickle+send {r['pickle_send_s']:.2f} s on rank 0, "
          f"{r['pickled_mb']:.0f} MB; collate on every rank")
    print(f"    now: {r['light_mb']:.1f} MB pickled + {r['tensor_mb']:.0f} MB of tensors")
    print(f"  collate: {r['collate_s']:.2f} s now, {r['collate_before_s']:.2f} s before: "
          f"x{r['collate_ratio']:.1f}")
    print(f"  decoding vLLM's replies on rank 0: {r['decode_s']:.1f} s per step "
          f"({r['decode_tokens_per_s'] / 1e6:.2f}M tokens/s; on the generator's thread)")
    return 0
