"""Helpers shared by the e2e tests: run a `scalerl train` command, read its steps and weights."""

import json
import subprocess
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
