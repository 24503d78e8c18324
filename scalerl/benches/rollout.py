"""`scalerl bench rollout`: the in-process generator's tokens/s beside bare vLLM, with scoring.

One run, same model, prompts and settings: bare `vllm.LLM.generate`, the EngineGenerator without
scoring, and with each completion scored as it finishes. Both engines are started side by side
and warmed up, the GC heap frozen once for both, then the four paths are timed in turn, each
after a pause, `--repeats` times; the best of each is kept (shared, noisy machine). Targets:
wrapper and scoring cost each <= 10%. The wrapper ratio is against bare vLLM with the same
sampling parameters (logprobs, seeds), plain beside it. With `--server URL` the in-process
EngineGenerator is timed the same way beside generation on those vLLM servers (same seeds, so
the same tokens; target >= 0.85x).
"""

from __future__ import annotations

import argparse
import json
import time

from scalerl.benches import positive_int

HELP = "generation tokens/s: EngineGenerator with scoring vs without vs bare vllm.LLM.generate"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny", help="model dir or 'tiny' (default)")
    parser.add_argument("--task", default="arith", help="prompts and verifier (default arith)")
    parser.add_argument("--prompts", type=positive_int, default=128, help="prompts (default 128)")
    parser.add_argument("--n", type=positive_int, default=4, help="rollouts per prompt (default 4)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed rounds (best kept; default 3)")
    parser.add_argument("--max-tokens", type=positive_int, default=96,
                        help="completion cap (default 96)")
    parser.add_argument("--server", action="append", metavar="URL",
                        help="measure generation on this vLLM server (`scalerl serve`, same "
                        "model) beside the in-process EngineGenerator instead (repeatable)")


SETTLE_S = 1.5
"""Pause before each timed pass: vLLM's workers spin for 1 s after their last step, and the
other engine's spin must not land in the next pass."""


def _bare_engine(model: str, config):
    """A bare `vllm.LLM` with the EngineGenerator's engine arguments."""
    from vllm import LLM

    return LLM(**config.vllm_kwargs(model, fp32_head=True))


def _passes(llm, gen, samples, prompts, n: int, budget, seed: int) -> dict:
    """One pass of each measured path -> name -> (tokens, seconds to the last generated token,
    seconds to the last verdict). Bare passes: plain defaults, and the EngineGenerator's sampling
    parameters (sampled-token logprobs, per-rollout seeds, no detokenization). Each round has its
    own `seed`: a scored pass never re-scores the completions of an earlier one (the verifier's
    caches would make scoring look free)."""
    from vllm import SamplingParams

    common = dict(temperature=1.0, top_p=1.0, top_k=0, max_tokens=budget.hard_cap(0))
    inputs = [{"prompt_token_ids": p} for p in prompts for _ in range(n)]
    plain = SamplingParams(**common)
    same = [SamplingParams(**common, logprobs=0, flat_logprobs=True, detokenize=False,
                           seed=seed * len(inputs) + i) for i in range(len(inputs))]

    def bare(params):
        t = time.perf_counter()
        outs = llm.generate(inputs, params, use_tqdm=False)
        dt = time.perf_counter() - t
        return sum(len(o.outputs[0].token_ids) for o in outs), dt, dt

    def engine(score: bool):
        t = time.perf_counter()
        rollouts = gen.generate(samples, n=n, budget=budget, temperature=1.0, seed=seed,
                                score=score)
        done = time.perf_counter()
        tokens = sum(sum(lp is not None for lp in r.logprobs) for r in rollouts)
        return tokens, max(r.timings["gen_end"] for r in rollouts) - t, done - t

    runs = {"bare": lambda: bare(plain), "bare_same": lambda: bare(same),
            "engine": lambda: engine(False), "scored": lambda: engine(True)}
    out = {}
    for name, go in runs.items():
        time.sleep(SETTLE_S)
        out[name] = go()
    return out


def _best(passes: list[dict]) -> dict[str, float]:
    """Best tokens/s of each path over the passes (to the last token; `scored_e2e`: to the last
    verdict)."""
    best = {name: max(tok / gen_s for tok, gen_s, _ in (p[name] for p in passes))
            for name in passes[0]}
    best["scored_e2e"] = max(tok / e2e for tok, _, e2e in (p["scored"] for p in passes))
    return best


def _measure(args, model: str, samples, budget, config) -> tuple[list[dict], dict, dict]:
    """Start both engines, warm them up, time `args.repeats` rounds -> (passes, scoring latency,
    the EngineGenerator's memory: this process and its own engine processes, not the bare
    engine's)."""
    import psutil
    from tqdm import tqdm

    from scalerl.envs.catalog import get_task
    from scalerl.rollout.engine import EngineGenerator, freeze_heap
    from scalerl.rollout.engine_config import process_tree_rss_mb
    from scalerl.rollout.scorer import Scorer

    scorer = Scorer([get_task(args.task)])
    gen, llm = EngineGenerator(model, config=config, scorer=scorer), None
    try:
        own = [p.pid for p in psutil.Process().children(recursive=True)]
        prompts = [gen.prompt_ids(s) for s in samples]
        llm = _bare_engine(model, config)
        gen.generate(samples[:8], n=4, budget=budget, score=False)  # warm-up
        llm.generate([{"prompt_token_ids": p} for p in prompts[:8]], use_tqdm=False)
        freeze_heap()  # again, so the bare engine's start-up objects are frozen too
        scorer.score(samples[0], "\\boxed{0}")  # start the verifier pool before timing
        passes = [_passes(llm, gen, samples, prompts, args.n, budget, seed)
                  for seed in tqdm(range(args.repeats), desc="bench rollout", unit="round",
                                   disable=args.json)]
        latency = scorer.latency()
        memory = process_tree_rss_mb(children=own)
    finally:
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        gen.close()
    return passes, latency, memory


def _measure_servers(args, model: str, samples, budget, config) -> list[dict]:
    """The in-process EngineGenerator and the servers' generator, both warmed up, timed in turn
    (same seeds, so the same tokens) `args.repeats` times -> passes of name -> (tokens, s)."""
    import dataclasses

    from scalerl.envs.catalog import get_task
    from scalerl.rollout.engine import EngineGenerator, freeze_heap
    from scalerl.rollout.scorer import Scorer
    from scalerl.rollout.server_generator import ServerGenerator

    tasks = [get_task(args.task)]
    gen, remote = EngineGenerator(model, config=config, scorer=Scorer(tasks)), None
    try:
        remote = ServerGenerator(model, config=dataclasses.replace(
            config, servers=tuple(args.server)), scorer=Scorer(tasks))
        for g in (gen, remote):
            g.generate(samples[:8], n=4, budget=budget, score=False)  # warm-up
        freeze_heap()
        passes = []
        for seed in range(args.repeats):
            times = {}
            for name, g in (("engine", gen), ("server", remote)):
                time.sleep(SETTLE_S)
                t = time.perf_counter()
                rollouts = g.generate(samples, n=args.n, budget=budget, temperature=1.0,
                                      seed=seed, score=False)
                tokens = sum(sum(lp is not None for lp in r.logprobs) for r in rollouts)
                times[name] = (tokens, max(r.timings["gen_end"] for r in rollouts) - t)
            passes.append(times)
    finally:
        if remote is not None:
            remote.close()
        gen.close()
    return passes


def run_servers(args, model: str, samples, budget, config) -> int:
    passes = _measure_servers(args, model, samples, budget, config)
    best = {name: max(tok / s for tok, s in (p[name] for p in passes)) for name in passes[0]}
    result = {"engine_tok_s": round(best["engine"], 1), "server_tok_s": round(best["server"], 1),
              "server_ratio": round(best["server"] / best["engine"], 3),
              "servers": list(args.server), "rollouts": len(samples) * args.n,
              "task": args.task, "repeats": args.repeats}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"Generator in this process : {result['engine_tok_s']:>9.1f} tok/s")
        print(f"Generator on {len(args.server)} server(s)  : "
              f"{result['server_tok_s']:>9.1f} tok/s "
              f"(ratio {result['server_ratio']:.3f}; target >= 0.85)")
    return 0


def run(args: argparse.Namespace) -> int:
    from scalerl.envs.catalog import get_task
    from scalerl.models import resolve_model
    from scalerl.rollout.engine import EngineConfig
    from scalerl.rollout.types import Budget

    model = resolve_model(args.model)
    samples = list(get_task(args.task).samples("test"))[: args.prompts]
    # Thinking budget past the natural length: no interruptions, so all three do the same work.
    budget = Budget(thinking=args.max_tokens, answer=args.max_tokens, total=args.max_tokens)
    config = EngineConfig(kv_cache_gib=1.0, memory_fraction=0.1, max_model_len=1024)
    if args.server:
        return run_servers(args, model, samples, budget, config)
    passes, latency, memory = _measure(args, model, samples, budget, config)
    best = _best(passes)
    result = {
        "bare_vllm_tok_s": round(best["bare"], 1),
        "bare_vllm_same_params_tok_s": round(best["bare_same"], 1),
        "engine_tok_s": round(best["engine"], 1),
        "engine_scored_tok_s": round(best["scored"], 1),
        "engine_scored_until_last_verdict_tok_s": round(best["scored_e2e"], 1),
        "wrapper_ratio": round(best["engine"] / best["bare_same"], 3),
        "wrapper_ratio_vs_plain": round(best["engine"] / best["bare"], 3),
        "scoring_ratio": round(best["scored"] / best["engine"], 3),
        "engine_rss_mb": round(memory["total_mb"], 1),
        "engine_children_rss_mb": round(memory["children_mb"], 1),
        "score_latency": latency, "rollouts": len(samples) * args.n, "task": args.task,
        "repeats": args.repeats,
    }
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    return 0


def _print(result: dict) -> None:
    print(f"bare vllm.LLM.generate : {result['bare_vllm_tok_s']:>9.1f} tok/s (plain)")
    print(f"  same sampling params : {result['bare_vllm_same_params_tok_s']:>9.1f} tok/s "
          "(logprobs, seeds)")
    print(f"Generator              : {result['engine_tok_s']:>9.1f} tok/s "
          f"(wrapper ratio {result['wrapper_ratio']:.3f} vs same params, "
          f"{result['wrapper_ratio_vs_plain']:.3f} vs plain; target >= 0.90)")
    print(f"Generator + scoring    : {result['engine_scored_tok_s']:>9.1f} tok/s "
          f"(scoring ratio {result['scoring_ratio']:.3f}; target >= 0.90)")
    print(f"engine resident memory : {result['engine_rss_mb']:.0f} MiB "
          f"(engine children {result['engine_children_rss_mb']:.0f} MiB; main process includes "
          "the bare engine's client)")
