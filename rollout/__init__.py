"""Rollout: the vLLM Generator, length budgets with forced interruption, streaming scoring."""
