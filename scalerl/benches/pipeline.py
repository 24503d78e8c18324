"""`scalerl bench pipeline`: PipelineRL's overlap with a trainer on its own device, simulated.

On a 2-core machine generation alone fills both cores, so a real trainer step here steals from
generation and PipelineRL cannot show what it gains when the trainer has its own GPUs. This bench
keeps everything real but the step: the generator (vLLM in this process, or `--server` URLs), the
rollout sources (PPO-offpolicy-1 and PipelineRL-k with its driver, buffer and lag bound) and the
weight publishing (the policy's weights, in flight for PipelineRL) run as in training, while the
optimizer step is replaced by a stand-in that sleeps for the step time measured first on the
real trainer (this model, a batch generated here), holding no CPU. Prints steps/s of both
modes, their ratio, and ideal_ratio: what perfect overlap of the measured per-step generation,
step and publishing times would give, (gen + step + sync) / (max(gen, step) + sync).

The machine is shared and noisy, so the two modes run `--repeats` times on one engine, each
repeat with fresh sources and the order of the two modes alternated (a load that drifts during a
run then weighs on both); every figure is printed as the median of the repeats with its min-max
spread, each repeat's ratio is its own two modes' (same conditions), and `--json` carries every
repeat's figures (`runs`). One noisy run can then neither hide nor fake a regression.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from scalerl.benches import positive_int

HELP = ("PipelineRL vs PPO-offpolicy steps/s with the trainer step simulated off this machine "
        "(real engine, driver and weight publishing)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=positive_int, default=12,
                        help="timed steps per mode (default 12)")
    parser.add_argument("--config", default="tiny-cpu", help="recipe or YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (repeatable)")
    parser.add_argument("--server", action="append", metavar="URL",
                        help="generate on this vLLM server (repeatable) instead of in-process")
    parser.add_argument("--step-s", type=float,
                        help="stand-in step seconds (default: measured on the real trainer)")
    parser.add_argument("--repeats", "--repeat", type=positive_int, default=3,
                        help="runs of both modes, order alternated; figures are the median with "
                             "min-max (default 3)")


def build(args: argparse.Namespace, run_dir: Path):
    """(config, run with a PPO source, tasks, generator); the generator is started."""
    from transformers import AutoTokenizer

    from scalerl.config import load_config, validate
    from scalerl.models import resolve_model
    from scalerl.rollout.factory import make_generator
    from scalerl.rollout.scorer import Scorer
    from scalerl.trainer.loop import TrainTask, setup
    from scalerl.training import build_accelerator, build_policy, run_tasks

    sets = ["val.every=0", "checkpoint.every=0", "log.progress=false", "log.trackers=[]",
            "offpolicy.mode=ppo", "offpolicy.k=1", *args.set]
    cfg = validate(load_config(args.config, sets))
    if args.server:
        cfg = dataclasses.replace(cfg, engine=dataclasses.replace(
            cfg.engine, servers=tuple(args.server)))
    model_path = resolve_model(cfg.policy.model)
    objects = run_tasks(cfg)
    tasks = {t.name: TrainTask(objects[t.name], t.budget, t.weight) for t in cfg.tasks}
    generator = make_generator(model_path, cfg.engine, fp32_head=cfg.policy.fp32_head,
                               scorer=Scorer(objects, cfg.grading))
    accelerator = build_accelerator(cfg.policy)
    policy = build_policy(cfg.policy, model_path, accelerator)
    run = setup(cfg, policy, AutoTokenizer.from_pretrained(model_path), generator, tasks,
                run_dir, accelerator)
    return cfg, run, tasks, generator


SETTLE_S = 1.5
"""Pause before timing the real step: vLLM's worker spins for ~1 s after its last step."""


def measure_step_s(run, repeats: int = 3) -> float:
    """Seconds of the real optimizer step on a batch generated here, the engine idle (the best of
    `repeats`: a trainer on its own device does not share it)."""
    from scalerl.trainer.loop import filter_groups, next_groups, optimise

    for _ in range(5):
        kept, report = filter_groups(run, next_groups(run)[0])
        if kept:
            break
    time.sleep(SETTLE_S)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        optimise(run, kept, report)
        times.append(time.perf_counter() - t)
    return min(times)


def drive(source, steps: int, step_s: float, weights, first_version: int) -> dict[str, float]:
    """`steps` + 1 loop iterations with the stand-in step; steps/s and completion tokens per
    step over the last `steps`."""
    ends, tokens = [], 0.0
    for i in range(steps + 1):
        _, metrics = source.next_groups(first_version + i)
        tokens += metrics["rollout/round_tokens"] if i else 0.0
        time.sleep(step_s)  # the trainer on its own device: no CPU taken from generation
        source.on_step(first_version + i + 1, weights)
        ends.append(time.perf_counter())
    idle = source.idle()
    source.close()
    return {"steps_per_s": steps / (ends[-1] - ends[0]), "steps": steps,
            "tokens_per_step": tokens / steps,
            "gen_s_per_step": idle["gen_s"] / (steps + 1),
            "sync_s_per_step": idle["sync_s"] / (steps + 1)}


MODES = ("pipelinerl", "ppo")
"""The two modes, in the order of even repeats (odd repeats run them the other way round)."""


def one_repeat(runs: dict[str, dict[str, float]], step_s: float, first: str) -> dict:
    """One repeat's figures: both modes', their ratio and the ideal ratio from its PPO times."""
    ppo, pipe = runs["ppo"], runs["pipelinerl"]
    gen, sync = ppo["gen_s_per_step"], ppo["sync_s_per_step"]
    return {"ppo": ppo, "pipelinerl": pipe, "first": first,
            "ratio": pipe["steps_per_s"] / ppo["steps_per_s"],
            "ideal_ratio": (gen + step_s + sync) / (max(gen, step_s) + sync)}


FIGURES = {"ppo_steps_per_s": ("ppo", "steps_per_s"),
           "pipelinerl_steps_per_s": ("pipelinerl", "steps_per_s"),
           "ppo_gen_s_per_step": ("ppo", "gen_s_per_step"),
           "pipelinerl_gen_s_per_step": ("pipelinerl", "gen_s_per_step"),
           "ppo_sync_s_per_step": ("ppo", "sync_s_per_step"),
           "pipelinerl_sync_s_per_step": ("pipelinerl", "sync_s_per_step"),
           "ppo_tokens_per_step": ("ppo", "tokens_per_step"),
           "pipelinerl_tokens_per_step": ("pipelinerl", "tokens_per_step"),
           "ratio": ("ratio",), "ideal_ratio": ("ideal_ratio",)}
"""Figures summarised across repeats: name -> its path in one repeat's dict."""


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of one figure over the repeats."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(repeats: list[dict]) -> dict:
    """Every figure's spread over `repeats`, and each mode's medians (the top-level figures)."""
    def values(path: tuple[str, ...]) -> list[float]:
        out = []
        for rep in repeats:
            for key in path:
                rep = rep[key]
            out.append(rep)
        return out

    spreads = {name: spread(values(path)) for name, path in FIGURES.items()}
    modes = {mode: {"steps": repeats[0][mode]["steps"]} | {
        key: spreads[f"{mode}_{key}"]["median"]
        for key in ("steps_per_s", "tokens_per_step", "gen_s_per_step", "sync_s_per_step")}
        for mode in MODES}
    return modes | {"ratio": spreads["ratio"]["median"],
                    "ideal_ratio": spreads["ideal_ratio"]["median"], "spread": spreads}


def measure(args: argparse.Namespace) -> dict:
    from scalerl.trainer.loop import make_sampler, source_settings, unwrap
    from scalerl.trainer.pipeline_source import PipelineSource
    from scalerl.trainer.policy import named_weights
    from scalerl.trainer.publish import make_publisher
    from scalerl.trainer.sources import PPOOffPolicy

    with tempfile.TemporaryDirectory(prefix="scalerl-bench-pipeline-") as tmp:
        cfg, run, tasks, generator = build(args, Path(tmp))
        try:
            step_s = args.step_s if args.step_s is not None else measure_step_s(run)
            settings = source_settings(cfg, tasks)

            def weights():
                return named_weights(unwrap(run))

            def source(kind):
                publisher = make_publisher(cfg.engine.weight_transfer, generator,
                                           timeout_s=cfg.engine.weight_timeout_s)
                return kind(generator, make_sampler(cfg, tasks, run.retirement), settings,
                            publisher)

            kinds = {"pipelinerl": PipelineSource, "ppo": PPOOffPolicy}
            repeats = []
            for i in range(args.repeats):
                order = MODES if i % 2 == 0 else MODES[::-1]
                runs = {mode: drive(source(kinds[mode]), args.steps, step_s, weights,
                                    generator.version) for mode in order}
                repeats.append(one_repeat(runs, step_s, order[0]))
        finally:
            run.writer.close()
            generator.close()
    return summarise(repeats) | {
        "step_s": step_s, "repeats": args.repeats, "runs": repeats,
        "max_lag": cfg.offpolicy.max_lag, "prompts_per_step": cfg.offpolicy.prompts_per_step,
        "rollouts_per_prompt": cfg.offpolicy.rollouts_per_prompt,
        "generation": "servers" if args.server else "in-process"}


def span(figure: dict[str, float], fmt: str) -> str:
    """`median (min-max)` of one figure's spread."""
    return (f"{figure['median']:{fmt}} ({figure['min']:{fmt}}-{figure['max']:{fmt}})")


def run(args: argparse.Namespace) -> int:
    result = measure(args)
    if args.json:
        print(json.dumps(result))
        return 0
    sp = result["spread"]
    print(f"{result['repeats']} repeats, median (min-max):")
    for mode in ("ppo", "pipelinerl"):
        print(f"{mode:>10}: {span(sp[f'{mode}_steps_per_s'], '.3f')} steps/s of "
              f"{span(sp[f'{mode}_tokens_per_step'], '.0f')} tokens (generation "
              f"{span(sp[f'{mode}_gen_s_per_step'], '.2f')} s/step, publishing "
              f"{span(sp[f'{mode}_sync_s_per_step'], '.3f')} s/step)")
    ratios = ", ".join(f"x{r['ratio']:.2f} ({r['first']} first)" for r in result["runs"])
    print(f"stand-in step {result['step_s']:.2f} s; PipelineRL-{result['max_lag']} / PPO: "
          f"x{span(sp['ratio'], '.2f')} (ideal x{span(sp['ideal_ratio'], '.2f')}; targets "
          f">= 0.85 x ideal and >= 1.5); per repeat: {ratios}")
    return 0
