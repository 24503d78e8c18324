"""`SandboxConfig`: the `sandbox:` section of the run config (backend, concurrency, grading caps).

Covered: the fields, each documented once under it, and their checks (one-line ValueErrors that
name the field and what is allowed). Not here: using it (the code verifier passes its values to
`get_backend` and `Limits`), reading YAML (scalerl/config.py composes the run config), the
per-run `Limits` (base.py).
"""

from __future__ import annotations

from dataclasses import dataclass

KNOWN_BACKENDS = ("bwrap", "bwrap-cold", "docker", "process")
"""Names `SandboxConfig.backend` accepts: the registered backends (a test keeps them equal)."""
MIN_MEMORY_MB = 16


@dataclass(frozen=True)
class SandboxConfig:
    """Which sandbox runs model-written code, how many programs at once, and each run's caps."""

    backend: str | None = None
    """bwrap | bwrap-cold | docker | process; None: the best available here (bwrap, else docker).
    'process' is not a security boundary and is used only when named."""
    workers: int | None = None
    """Sandboxed programs run at once per backend (its warm workers); None: the backend's default
    (bwrap: one per core; docker: 2 containers)."""
    memory_mb: int = 512
    """Memory limit of one grading run (a program with all its tests), in MiB."""
    max_run_s: float = 60.0
    """Wall-clock cap of one grading run (a program with all its tests), in seconds; a code
    comparison rule whose reference harness sets its own global limit (LiveCodeBench's, used by
    `livecodebench` and `deepcoder`) uses that instead."""

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in KNOWN_BACKENDS:
            raise ValueError(f"sandbox.backend must be one of {list(KNOWN_BACKENDS)} or null, "
                             f"got {self.backend!r}")
        if self.workers is not None and not (_is_int(self.workers) and self.workers >= 1):
            raise ValueError(f"sandbox.workers must be an integer >= 1 or null, "
                             f"got {self.workers!r}")
        if not (_is_int(self.memory_mb) and self.memory_mb >= MIN_MEMORY_MB):
            raise ValueError(f"sandbox.memory_mb must be an integer >= {MIN_MEMORY_MB}, "
                             f"got {self.memory_mb!r}")
        if not (_is_number(self.max_run_s) and self.max_run_s > 0):
            raise ValueError(f"sandbox.max_run_s must be a finite number > 0, "
                             f"got {self.max_run_s!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and value == value and value != float("inf"))
