"""Helpers shared by the e2e tests: run a `scalerl train` command, read its steps and weights."""

import json
import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file


def run_to_end(cmd: list[str], timeout: float = 900, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def steps_of(run_dir: Path) -> dict[int, dict]:
    """metrics.jsonl rows of optimizer steps (or empty-batch steps), by step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss/value" in r or "batch/empty" in r}


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "step-000006" / "model.safetensors")


def busy_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat's first line)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass(frozen=True)
class Timed:
    """A command's wall time, its own CPU time (its reaped process tree), and the CPU time the
    rest of the machine used meanwhile."""

    proc: subprocess.CompletedProcess
    wall_s: float
    cpu_s: float
    other_cpu_s: float

    @property
    def others_share(self) -> float:
        """The share of the machine's CPU capacity other work used during the run."""
        return self.other_cpu_s / max((os.cpu_count() or 1) * self.wall_s, 1e-9)


def timed_run(cmd: list[str], timeout: float) -> Timed:
    """Run `cmd`, measuring its wall and CPU time and the machine's other CPU use meanwhile."""
    hz = os.sysconf("SC_CLK_TCK")
    before, (busy0, _) = resource.getrusage(resource.RUSAGE_CHILDREN), busy_ticks()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    after, (busy1, _) = resource.getrusage(resource.RUSAGE_CHILDREN), busy_ticks()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(proc, wall, cpu, max((busy1 - busy0) / hz - cpu, 0.0))
