"""`Grading`: what a verdict needs from the run beyond the sample, passed down as one value.

A code verdict runs the candidate in the run's sandbox (`SandboxConfig`: backend, workers, the
caps of one grading run); a math verdict checks the answer in a pool of `verifiers.math_workers`
processes. The glue builds one `Grading` from the run config and hands it, with the run's Task
objects, to the scorer (rollout/scorer.py); `Task.score` passes it to the judge, and the kinds'
verifiers read what they need (envs/code/verifier.py, envs/math/verifier.py). `Grading()` is this
machine's defaults. Nothing here is process-wide state: the shared backends and pools are caches
keyed by these values. No verifier here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalerl.sandbox.config import SandboxConfig


@dataclass(frozen=True)
class VerifierConfig:
    """The `verifiers:` section of the run config: how the verifiers themselves run."""

    math_workers: int | None = None
    """Math-verify worker processes (the math verifier's deadline-enforced pool); None:
    min(4, cores)."""

    def __post_init__(self) -> None:
        w = self.math_workers
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ValueError(f"verifiers.math_workers must be an integer >= 1 or null, "
                             f"got {w!r}")


@dataclass(frozen=True)
class Grading:
    """The run's settings every verdict may need: the code sandbox and the verifiers' pools."""

    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    verifiers: VerifierConfig = field(default_factory=VerifierConfig)


DEFAULT_GRADING = Grading()
"""This machine's defaults: the best sandbox here, the default pool sizes."""
