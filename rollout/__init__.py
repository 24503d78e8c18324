"""Rollout: the vLLM generators (in-process engine, servers), length budgets with forced
interruption, streaming scoring, held-out evaluation."""
