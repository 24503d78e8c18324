"""Run `scalerl bench NAME --json ...` in a subprocess and return its JSON object (shared by the
bench tests)."""

from __future__ import annotations

import json
import subprocess
import sys


def bench_json(name: str, *args: str, timeout_s: float = 900) -> dict:
    """The last stdout line of `scalerl bench NAME --json ARGS`, parsed; fails with stderr's tail
    if the command does."""
    cmd = [sys.executable, "-m", "scalerl", "bench", name, "--json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
