"""Evaluation glue for `scalerl eval`: its settings, cache and report files (report.py,
render.py), the field's sampling protocols (protocols.py) and their prompt styles (prompts.py),
benchmark problems found in training data (contamination.py) and results sent to experiment
trackers (tracking.py). Generation and pass@k live in rollout/heldout.py; grading in envs/."""
