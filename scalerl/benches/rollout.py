"""`scalerl bench rollout`: the Generator's tokens/s beside bare vLLM and with scoring overlapped.

One run, same model, prompts and settings: bare `vllm.LLM.generate`, the Generator without
scoring, and with each completion scored as it finishes; engines warmed up, passes alternated,
best kept (shared machine). Targets: wrapper and scoring cost each <= 10%. The wrapper ratio
is against bare vLLM with the same sampling parameters (logprobs, seeds), plain beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

HELP = "generation tokens/s: Generator with scoring vs without vs bare vllm.LLM.generate"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny", help="model dir or 'tiny' (default)")
    parser.add_argument("--task", default="arith", help="prompts and verifier (default arith)")
    parser.add_argument("--prompts", type=int, default=128, help="prompts (default 128)")
    parser.add_argument("--n", type=int, default=4, help="rollouts per prompt (default 4)")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes each (best kept)")
    parser.add_argument("--max-tokens", type=int, default=96, help="completion cap (default 96)")


def _bare(model: str, config, prompts: list[list[int]], n: int, max_tokens: int,
          repeats: int) -> tuple[float, float]:
    """Best tokens/s of bare `LLM.generate`: plain defaults, and with the Generator's sampling
    parameters (sampled-token logprobs, per-rollout seeds, no detokenization), alternated."""
    from vllm import LLM, SamplingParams

    llm = LLM(model, dtype=config.dtype, max_model_len=config.max_model_len,
              gpu_memory_utilization=config.memory_fraction, seed=config.seed,
              enable_prefix_caching=config.enable_prefix_caching,
              enable_chunked_prefill=config.chunked_prefill, disable_log_stats=True,
              max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.batched_tokens,
              logprobs_mode="processed_logprobs",
              hf_overrides={"head_dtype": "float32"} if config.fp32_head else {})
    common = dict(temperature=1.0, top_p=1.0, top_k=0, max_tokens=max_tokens)
    inputs = [{"prompt_token_ids": p} for p in prompts for _ in range(n)]
    plain = SamplingParams(**common)
    same = [SamplingParams(**common, logprobs=0, flat_logprobs=True, detokenize=False, seed=i)
            for i in range(len(inputs))]
    llm.generate(inputs[:32], plain, use_tqdm=False)  # warm-up
    best = [0.0, 0.0]
    for _ in range(repeats):
        for k, params in enumerate((plain, same)):
            t = time.perf_counter()
            outs = llm.generate(inputs, params, use_tqdm=False)
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            best[k] = max(best[k], tokens / (time.perf_counter() - t))
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return best[0], best[1]


def _engine(gen, samples, n: int, budget, scorer, repeats: int) -> tuple[float, float, float]:
    """Best tokens/s of the Generator without and with scoring (passes alternated), the scored
    one over the time until the last rollout was generated (the scoring tail is reported apart:
    third value, tokens/s until the last verdict)."""
    best = [0.0, 0.0, 0.0]
    for _ in range(repeats):
        for k, sc in enumerate((None, scorer)):
            t = time.perf_counter()
            rollouts = gen.generate(samples, n=n, budget=budget, temperature=1.0, seed=0,
                                    scorer=sc, score=sc is not None)
            done = time.perf_counter()
            tokens = sum(sum(lp is not None for lp in r.logprobs) for r in rollouts)
            generated = max(r.timings["gen_end"] for r in rollouts)
            best[k] = max(best[k], tokens / (generated - t))
            if sc is not None:
                best[2] = max(best[2], tokens / (done - t))
    return best[0], best[1], best[2]


def run(args: argparse.Namespace) -> int:
    from scalerl.commands.generate import resolve_model
    from scalerl.envs.registry import get_task
    from scalerl.rollout.engine import EngineConfig, Generator
    from scalerl.rollout.scorer import Scorer
    from scalerl.rollout.types import Budget

    model = resolve_model(args.model)
    task = get_task(args.task)
    samples = list(task.samples("test"))[: args.prompts]
    # Thinking budget past the natural length: no interruptions, so all three do the same work.
    budget = Budget(thinking=args.max_tokens, answer=args.max_tokens, total=args.max_tokens)
    config = EngineConfig(kv_cache_gib=1.0, memory_fraction=0.1, max_model_len=1024)
    gen = Generator(model, config=config)
    try:
        prompts = [gen.prompt_ids(s) for s in samples]
        gen.generate(samples[:8], n=4, budget=budget, score=False)  # warm-up
        with Scorer(max_workers=4) as scorer:
            scorer.score(samples[0], "\\boxed{0}")  # start the verifier pool before timing
            engine_tok_s, scored_tok_s, scored_e2e = _engine(gen, samples, args.n, budget,
                                                             scorer, args.repeats)
            latency = scorer.latency()
        memory = gen.memory()
    finally:
        gen.close()
    gc.collect()
    bare_tok_s, bare_same_tok_s = _bare(model, config, prompts, args.n, args.max_tokens,
                                        args.repeats)
    result = {
        "bare_vllm_tok_s": round(bare_tok_s, 1),
        "bare_vllm_same_params_tok_s": round(bare_same_tok_s, 1),
        "engine_tok_s": round(engine_tok_s, 1),
        "engine_scored_tok_s": round(scored_tok_s, 1),
        "engine_scored_until_last_verdict_tok_s": round(scored_e2e, 1),
        "wrapper_ratio": round(engine_tok_s / bare_same_tok_s, 3),
        "wrapper_ratio_vs_plain": round(engine_tok_s / bare_tok_s, 3),
        "scoring_ratio": round(scored_tok_s / engine_tok_s, 3),
        "engine_rss_mb": round(memory["total_mb"], 1),
        "engine_children_rss_mb": round(memory["children_mb"], 1),
        "score_latency": latency, "rollouts": len(samples) * args.n, "task": args.task,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bare vllm.LLM.generate : {result['bare_vllm_tok_s']:>9.1f} tok/s (plain)")
        print(f"  same sampling params : {result['bare_vllm_same_params_tok_s']:>9.1f} tok/s "
              "(logprobs, seeds)")
        print(f"Generator              : {result['engine_tok_s']:>9.1f} tok/s "
              f"(wrapper ratio {result['wrapper_ratio']:.3f} vs same params, "
              f"{result['wrapper_ratio_vs_plain']:.3f} vs plain; target >= 0.90)")
        print(f"Generator + scoring    : {result['engine_scored_tok_s']:>9.1f} tok/s "
              f"(scoring ratio {result['scoring_ratio']:.3f}; target >= 0.90)")
        print(f"engine resident memory : {result['engine_rss_mb']:.0f} MiB "
              f"(engine children {result['engine_children_rss_mb']:.0f} MiB)")
    return 0
