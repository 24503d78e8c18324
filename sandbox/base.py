"""The sandbox contract: `Limits` in, `ExecResult` out, one `Backend` interface, a registry.

Every backend (bwrap, docker, process) enforces the same `Limits` and reports the same
`ExecResult`. This module holds the shapes and the backend registry only; the backends live in
their own modules and register themselves on import.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from scalerl.sandbox.registry import Registry

ExecStatus = Literal["ok", "runtime_error", "timeout", "memory_limit", "output_limit",
                     "sandbox_error"]
EXEC_STATUSES: tuple[str, ...] = ("ok", "runtime_error", "timeout", "memory_limit",
                                  "output_limit", "sandbox_error")


@dataclass(frozen=True)
class Limits:
    """Resource limits every backend enforces for one run."""

    wall_s: float = 10.0
    """Wall-clock seconds before the whole run (every process it made) is killed."""
    cpu_s: float = 10.0
    """CPU seconds (RLIMIT_CPU) for each process of the run."""
    memory_mb: int = 512
    """Memory for the whole run (cgroup / container limit; RLIMIT_AS for `process`)."""
    processes: int = 32
    """Processes and threads the run may have at once (pids cgroup / pids-limit)."""
    open_files: int = 128
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    file_size_mb: int = 16
    """Largest file the run may write (RLIMIT_FSIZE); also caps the tmpfs work dir."""
    output_bytes: int = 4 << 20
    """Bytes kept from stdout and from stderr each; more sets `truncated` and `output_limit`."""

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "open_files", "file_size_mb",
                     "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one sandboxed run did. Read only after every process of the run is dead."""

    status: ExecStatus
    exit_code: int | None = None
    """Exit status when the program exited; None when it was killed by a signal."""
    signal: int | None = None
    """Signal number that ended the program, if any."""
    stdout: bytes = b""
    stderr: bytes = b""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    truncated: bool = False
    """True when stdout or stderr passed `Limits.output_bytes` and was cut."""
    backend: str = ""
    detail: str = ""
    """Human-readable reason for a non-ok status (what limit, what failed in the sandbox)."""
    extra: Mapping[str, bytes] = field(default_factory=dict)
    """Files the run asked to return (`collect=` paths in the work dir), capped like stdout."""

    def to_json(self) -> dict:
        return {
            "status": self.status, "exit_code": self.exit_code, "signal": self.signal,
            "stdout": self.stdout.decode("utf-8", "replace"),
            "stderr": self.stderr.decode("utf-8", "replace"),
            "wall_s": round(self.wall_s, 4), "cpu_s": round(self.cpu_s, 4),
            "truncated": self.truncated, "backend": self.backend, "detail": self.detail,
        }


class Backend(abc.ABC):
    """One way of running untrusted programs. Instances may keep warm workers; `close()` them."""

    name: str = ""

    @classmethod
    def create(cls, workers: int | None = None) -> Backend:
        """A new instance; `workers` sizes its warm pool where it has one (None: its default)."""
        return cls()

    @classmethod
    @abc.abstractmethod
    def available(cls) -> tuple[bool, str]:
        """(usable here, reason) without running anything expensive."""

    @abc.abstractmethod
    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = Limits(),
        collect: tuple[str, ...] = (),
    ) -> ExecResult:
        """Run `argv` in a fresh work dir holding `files`; return after everything it made is dead.

        `argv[0] == "python"` means the sandbox's isolated interpreter (`python3 -I`). Paths in
        `files` and `collect` are relative to the work dir, which is the program's cwd.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release warm workers or containers."""


BACKENDS: Registry[type[Backend]] = Registry("sandbox backend")
"""name -> Backend class, filled by `register_backend` as the backend modules are imported."""


def register_backend(name: str) -> Callable[[type[Backend]], type[Backend]]:
    """Class decorator: register a Backend subclass under `name` (its `name` attribute too)."""

    def deco(cls: type[Backend]) -> type[Backend]:
        cls.name = name
        BACKENDS.add(name, cls)
        return cls
    return deco
