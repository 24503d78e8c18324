"""One training step's rollouts at a recipe's scale, made up (`scalerl bench control`'s input).

`recipe_groups(prompts, n, budgets, max_model_len)` returns `prompts` groups of `n` `Rollout`s,
the project's own type, as a recipe's step would hand the trainer: each rollout's thinking budget
drawn from its task's range, its completion length uniform between 64 tokens and that
rollout's hard cap (the budget plus the answer; mean about half of it, the planner's
`COMPLETION_SHARE` assumption, scalerl/planning/layouts.py), a 512-token prompt (`PROMPT_TOKENS`
there), token ids below Qwen3-8B's vocab_size (151,936), float logprobs (None for the forced
interruption's tokens), per-token versions, a completion string of ~4 characters per token and
verdicts, as the generator fills them. `vllm_reply(rollout)` is the JSON a vLLM server sends for
it on `/inference/v1/generate` (`output_mode` tokens: logprob entries as vLLM 0.32's
`GenerateLogProbsContent`).
`collate_lists` is `collate` as it was, padding Python lists (the bench's "before"). Nothing
here generates, scores or trains.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from scalerl.envs.base import Score
from scalerl.planning.layouts import PROMPT_TOKENS
from scalerl.rollout.types import Budget, Rollout
from scalerl.trainer.advantages import compute_advantages
from scalerl.trainer.batch import TrainBatch
from scalerl.trainer.losses import aggregation_weights
from scalerl.trainer.rewards import rewards_of

VOCAB = 151_936
"""Qwen/Qwen3-8B config.json `vocab_size`."""
PHRASE = 16
"""Tokens of the forced interruption phrase (the recipe's "Okay, time is up. ... </think>", 82
characters: about 16 tokens at ~5 characters per token, an estimate)."""


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
    content = [{"token_id": t, "logprob": 0.0 if lp is None else lp, "rank": 1,
                "top_logprobs": []} for t, lp in zip(rollout.token_ids, rollout.logprobs,
                                                     strict=True)]
    return json.dumps({"choices": [{
        "index": 0, "token_ids": list(rollout.token_ids), "finish_reason": "stop",
        "logprobs": {"content": content},
        "weight_versions": [{"start": 0, "end": len(rollout.token_ids), "version": "3"}]}],
        "usage": {"prompt_tokens": len(rollout.prompt_token_ids),
                  "completion_tokens": len(rollout.token_ids)}})


def _pad(rows: list, value: float, dtype: torch.dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


def collate_lists(groups: list[list[Rollout]], *, normalise: str, aggregation: str,
                  pad_id: int, eps: float = 1e-6) -> TrainBatch:
    """trainer/batch.py's `collate` before trainer/columns.py (no zero-variance rows)."""
    rollouts = [r for g in groups for r in g]
    group_ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    rewards = torch.tensor([x for g in groups for x in rewards_of(g)])
    advantages = compute_advantages(rewards, group_ids, normalise=normalise, eps=eps)
    seqs = [list(r.prompt_token_ids) + list(r.token_ids) for r in rollouts]
    mask = _pad([[0.0 if lp is None else 1.0 for lp in r.logprobs] for r in rollouts], 0.0,
                torch.float32)
    batch = TrainBatch(
        input_ids=_pad(seqs, pad_id, torch.long),
        attention_mask=_pad([[1] * len(s) for s in seqs], 0, torch.long),
        prompt_lens=torch.tensor([len(r.prompt_token_ids) for r in rollouts]),
        completion_lens=torch.tensor([max(len(r.token_ids), 1) for r in rollouts]),
        old_logprobs=_pad([[0.0 if lp is None else lp for lp in r.logprobs] for r in rollouts],
                          0.0, torch.float32), mask=mask,
        advantages=advantages.unsqueeze(-1),
        weights=aggregation_weights(aggregation, mask, group_ids))
    return batch.select(torch.argsort(torch.tensor([len(s) for s in seqs]), stable=True))
