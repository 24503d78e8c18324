"""`Grading`: what a verdict needs from the run beyond the sample, passed down as one value.

A code verdict runs the candidate in the run's sandbox (`SandboxConfig`: backend, workers, the
caps of one grading run); a math verdict checks the answer in a pool of `verifiers.math_workers`
processes. The glue builds one `Grading` from the run config and hands it, with the run's Task
objects, to the scorer (rollout/scorer.py); `Task.score` passes it to the judge, and the kinds'
verifiers read what they need (envs/code/verifier.py, envs/math/verifier.py). `Grading()` is this
machine's defaults. `verifiers.cluster` says where the sandbox runs, math checks and tool
sessions run: here (`local`) or on the actors of a Ray cluster (`ray`, envs/ray_grading.py,
reached only through `cluster_grader`). Nothing here is process-wide state: the shared backends,
pools and Ray graders are caches keyed by these values. No verifier here.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Any

from scalerl.sandbox.config import SandboxConfig

CLUSTERS = ("local", "ray")
RAY_MISSING = "Ray is not installed: pip install 'scalerl[ray]' (or make install)"


@dataclass(frozen=True)
class VerifierConfig:
    """The `verifiers:` section of the run config: how and where the verifiers run."""

    math_workers: int | None = None
    """Math-verify worker processes (the math verifier's deadline-enforced pool; on `ray`, per
    actor); None: min(4, cores)."""
    cluster: str = "local"
    """Where code runs, math checks and tool sessions run: `local` (this machine) or `ray`
    (one long-lived grading actor per node, or per `cores_per_actor` cores, of a Ray cluster;
    the same sandbox and verifier code runs inside it; needs `pip install 'scalerl[ray]'`)."""
    ray_address: str | None = None
    """With `ray`: the cluster to attach to (`auto`: the one `ray start` made on this machine,
    `HOST:PORT`, `ray://HOST:10001`); None: start a Ray on this machine for the run (its temp
    dir removed at the end)."""
    cores_per_actor: int | None = None
    """With `ray`: cores one grading actor takes; a node of C cores runs C // cores_per_actor
    actors (at least one); None: one actor per node with all its cores."""
    max_in_flight: int | None = None
    """With `ray`: requests (verdicts, tool calls) one actor works on at once; more wait on
    the driver, which sends each to the least loaded actor; None: 2 per core of the actor."""

    def __post_init__(self) -> None:
        for name in ("math_workers", "cores_per_actor", "max_in_flight"):
            w = getattr(self, name)
            if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
                raise ValueError(f"verifiers.{name} must be an integer >= 1 or null, got {w!r}")
        if self.cluster not in CLUSTERS:
            raise ValueError(f"verifiers.cluster must be one of {list(CLUSTERS)}, "
                             f"got {self.cluster!r}")
        address = self.ray_address
        if address is not None and not (isinstance(address, str) and address.strip()):
            raise ValueError(f"verifiers.ray_address must be a Ray address (auto, HOST:PORT, "
                             f"ray://HOST:10001) or null, got {address!r}")
        if self.cluster == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError(f"verifiers.cluster is 'ray' but {RAY_MISSING}")


@dataclass(frozen=True)
class Grading:
    """The run's settings every verdict may need: the code sandbox and the verifiers' pools."""

    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    verifiers: VerifierConfig = field(default_factory=VerifierConfig)


DEFAULT_GRADING = Grading()
"""This machine's defaults: the best sandbox here, the default pool sizes."""


def cluster_grader(grading: Grading) -> Any:
    """The run's Ray cluster as local grading's parts (envs/ray_remote.py `Remote`: `backend`,
    `math_pool`, `sessions`; it connects at its first use), or None when grading runs on this
    machine."""
    v = grading.verifiers
    if v.cluster == "local":
        return None
    from scalerl.envs.ray_grading import grader
    from scalerl.envs.ray_remote import Remote

    return Remote(grader(v.ray_address, v.cores_per_actor, v.max_in_flight))


def close_clusters() -> None:
    """Stop every Ray grader this process started (its actors, its sandboxes, and the Ray it
    started itself); nothing when none was used."""
    if "scalerl.envs.ray_grading" in sys.modules:  # imported only by a run that used Ray
        from scalerl.envs.ray_grading import close_graders

        close_graders()
