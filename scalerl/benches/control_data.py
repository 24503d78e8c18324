"""One training step's rollouts at a recipe's scale, made up (`scalerl bench control`'s input).

`recipe_groups(cfg)` returns prompts_per_step groups of rollouts_per_prompt `Rollout`s, the
project's own type, as a step of `cfg` would hand the trainer: each rollout's thinking budget
drawn from its task's range, its completion length uniform between 64 tokens and that
rollout's hard cap (the budget plus the answer; mean about half of it, the planner's
`COMPLETION_SHARE` assumption, scalerl/planning/layouts.py), a 512-token prompt (`PROMPT_TOKENS`
there), token ids below Qwen3's 151,669-token vocabulary, float logprobs (None for the forced
interruption's tokens), per-token versions, a completion string of ~4 characters per token and
verdicts, as the generator fills them. `vllm_reply(rollout)` is the JSON a vLLM server sends for
it on `/inference/v1/generate` (logprob entries as vLLM 0.32's ChatCompletionLogProbsContent).
Nothing here generates, scores or trains.
"""

from __future__ import annotations

import json

import numpy as np

from scalerl.envs.base import Score
from scalerl.planning.layouts import PROMPT_TOKENS
from scalerl.rollout.types import Budget, Rollout

VOCAB = 151_669
"""Qwen3's vocabulary (Qwen/Qwen3-8B config.json `vocab_size` is 151,936 with padding)."""
PHRASE = 16
"""Tokens of the forced interruption phrase (about the recipe's "Okay, time is up..." line)."""


def _lengths(rng: np.random.Generator, budget: Budget, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Completion lengths of `n` rollouts and their thinking budgets."""
    low, high = budget.thinking if isinstance(budget.thinking, tuple) else (budget.thinking,) * 2
    thinking = rng.integers(low, high + 1, n)
    caps = thinking + PHRASE + budget.answer
    return rng.integers(64, caps + 1), thinking


def recipe_groups(prompts: int, n: int, budgets: list[Budget], max_model_len: int,
                  seed: int = 0) -> list[list[Rollout]]:
    """`prompts` groups of `n` rollouts, prompt i of task budgets[i % len(budgets)]."""
    rng = np.random.default_rng(seed)
    groups = []
    for i in range(prompts):
        budget = budgets[i % len(budgets)]
        prompt = tuple(rng.integers(0, VOCAB, PROMPT_TOKENS).tolist())
        lengths, thinking = _lengths(rng, budget, n)
        lengths = np.minimum(lengths, max_model_len - PROMPT_TOKENS)
        group = []
        for g in range(n):
            length, think = int(lengths[g]), int(thinking[g])
            interrupted = length > think
            logprobs = (-rng.exponential(0.7, length)).tolist()
            if interrupted:
                logprobs[think:think + PHRASE] = [None] * len(logprobs[think:think + PHRASE])
            versions = [100 + int(v) for v in np.sort(rng.integers(0, 3, length))]
            status = ("correct", "wrong", "no_answer")[int(rng.integers(0, 3))]
            group.append(Rollout(
                sample_id=f"s{i}", task=f"task{i % len(budgets)}", prompt_token_ids=prompt,
                token_ids=tuple(rng.integers(0, VOCAB, length).tolist()),
                logprobs=tuple(logprobs), versions=tuple(versions),
                finish_reason="interrupted" if interrupted else "stop",
                thinking_tokens=min(length, think), answer_tokens=max(0, length - think),
                completion="x" * (4 * length), group=g, interrupted=interrupted,
                score=Score(status=status, detail="answer 42", latency_s=0.01),
                timings={"gen_s": 100.0, "score_s": 0.01, "gen_end": 5.0},
                meta={"index": i}))
        groups.append(group)
    return groups


def vllm_reply(rollout: Rollout) -> str:
    """The reply body of a vLLM server's `/inference/v1/generate` for `rollout`'s tokens."""
    content = [{"token": f"token_id:{t}", "logprob": 0.0 if lp is None else lp, "bytes": None,
                "top_logprobs": []} for t, lp in zip(rollout.token_ids, rollout.logprobs,
                                                     strict=True)]
    return json.dumps({"choices": [{
        "index": 0, "token_ids": list(rollout.token_ids), "finish_reason": "stop",
        "logprobs": {"content": content},
        "weight_versions": [{"start": 0, "end": len(rollout.token_ids), "version": "3"}]}],
        "usage": {"prompt_tokens": len(rollout.prompt_token_ids),
                  "completion_tokens": len(rollout.token_ids)}})
