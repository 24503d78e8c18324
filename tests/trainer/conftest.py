"""Small helpers for trainer tests: a tiny random Qwen2 (no download, no vLLM) and fake groups.

The rollouts here are hand-made (token ids, logprobs, verdicts, and the ±1 rewards the trainer
would assign) because these tests exercise the trainer's maths on fixed inputs; the slow tests use
the real engine from tests/conftest.py.
"""

import random

import pytest
import torch

from scalerl.envs.base import Score
from scalerl.rollout.types import Rollout

VOCAB = 48


def tiny_qwen2(seed: int = 0, dtype=torch.float32, tied: bool = False):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1,
                         max_position_embeddings=128, tie_word_embeddings=tied)
    return Qwen2ForCausalLM(config).to(dtype)


def fake_groups(n_prompts: int = 3, n: int = 4, seed: int = 0, forced: bool = True):
    rng = random.Random(seed)
    groups = []
    for p in range(n_prompts):
        prompt = tuple(rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 6)))
        group = []
        for g in range(n):
            length = rng.randint(1, 7)
            tokens = tuple(rng.randrange(1, VOCAB) for _ in range(length))
            logprobs = [-rng.uniform(2.5, 5.0) for _ in range(length)]
            if forced and length > 2 and g == 0:
                logprobs[1] = None
            status = "correct" if (g + p) % 2 == 0 else "wrong"
            group.append(Rollout(
                sample_id=f"s{p}", task="arith", prompt_token_ids=prompt, token_ids=tokens,
                logprobs=tuple(logprobs), versions=(0,) * length, finish_reason="stop",
                thinking_tokens=0, answer_tokens=length, completion="",
                score=Score(status=status), reward=1.0 if status == "correct" else -1.0,
                group=g))
        groups.append(group)
    return groups


@pytest.fixture
def model():
    return tiny_qwen2()
