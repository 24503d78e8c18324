"""Trainer: the ScaleRL losses, advantages, filters and the Accelerate off-policy loop."""
