"""A model whose LM head is tied to its embedding takes new weights whole (slow: its own engine).

vLLM 0.32 reloads in place only the layers whose tensors it is given; a tied head has no tensor of
its own, so on CPU it kept the prepacked copy of the first weights and generation drifted from
the trainer's policy after every update (rollout/vllm_worker.py). Checked here against a Hugging
Face forward of the very weights that were published.
"""

from __future__ import annotations

import pytest
import torch

from scalerl.envs.catalog import get_task
from scalerl.rollout.types import Budget
from scalerl.trainer.policy import named_weights

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tied(tmp_path_factory, tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scalerl.rollout.engine import EngineGenerator
    from scalerl.rollout.engine_config import EngineConfig
    from scalerl.rollout.scorer import Scorer

    out = tmp_path_factory.mktemp("tied") / "model"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(out)
    config = EngineConfig(dtype="float32", kv_cache_gib=1.0, memory_fraction=0.05,
                          max_model_len=256, max_num_seqs=64, seed=0)
    generator = EngineGenerator(str(out), config=config, scorer=Scorer([get_task("arith")]))
    yield generator, AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    generator.close()


def max_logprob_gap(generator, model) -> float:
    """Largest |engine logprob - HF logprob| over the sampled tokens of 8 rollouts (T = 1)."""
    samples = list(get_task("arith").samples("test"))[:4]
    rollouts = generator.generate(samples, n=2, budget=Budget(thinking=16, answer=16),
                                  temperature=1.0, seed=1, score=False)
    gaps = []
    for r in rollouts:
        ids = torch.tensor([list(r.prompt_token_ids) + list(r.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(r.prompt_token_ids) - 1:-1]
        hf = torch.log_softmax(logits, -1).gather(1, torch.tensor(r.token_ids)[:, None])[:, 0]
        gaps += [abs(a - b) for a, b in zip(r.logprobs, hf.tolist(), strict=True)
                 if a is not None]
    assert len(gaps) > 50
    return max(gaps)


def test_a_tied_head_follows_each_published_embedding(tied):
    generator, model = tied
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert max_logprob_gap(generator, model) < 1e-4  # fp32 both sides
    for version in (1, 2):
        # A change of the size of many RL steps, in the one tensor the head shares.
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(1.5).add_(0.01)
        weights = list(named_weights(model))  # what the trainer publishes
        assert "lm_head.weight" not in dict(weights)  # a tied head has no tensor of its own
        generator.update_weights(weights, version)
        # Before the fix the head stayed at the first weights: gaps of 0.1-1 nats here.
        assert max_logprob_gap(generator, model) < 1e-4, version
