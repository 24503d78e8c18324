"""The tasks the slow tests generate for, as the scorer a session's engine and servers hold."""

from __future__ import annotations


def session_scorer():
    """A scorer for arith (and its add2 level) and synth_code, this machine's grading defaults."""
    from scalerl.envs.catalog import get_task
    from scalerl.rollout.scorer import Scorer

    return Scorer([get_task(n) for n in ("arith", "arith:add2", "synth_code")])
