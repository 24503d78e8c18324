"""`scalerl train` on two real vLLM servers (the session's `vllm_servers`, on loopback).

One server is SIGKILLed after step 2 while its scheduler holds requests (vLLM's gauges at
`/metrics`): its rollouts are issued again on the other and every step is trained, with the
generator/trainer mismatch at fp32 noise (max_lag 0: every batch on-policy, so the mismatch is
precision alone, ~1e-9; a lagged batch adds the policy's own change, ~1e-4, and a bf16 side
~1e-3). The other is then hung (SIGSTOP) after step 4: with no server left the run waits
`engine.server_wait_s`, writes a checkpoint and stops with exit code 75 and a message saying so;
once the server is back, `--resume` trains to the last step without repeating or skipping a batch.
Slow; it kills a server, so the session runs it after every other test on the servers.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from e2e_runs import run_to_end, steps_of

pytestmark = [pytest.mark.slow, pytest.mark.kills_server]

STEPS = 8


def command(run_dir: Path, model: str, urls: list[str], resume: bool = False) -> list[str]:
    sets = [f"steps={STEPS}", "checkpoint.every=0", "val.every=0", "offpolicy.mode=pipelinerl",
            "offpolicy.max_lag=0", "offpolicy.prompts_per_step=8",
            "offpolicy.rollouts_per_prompt=4", "filters.retire=false", "log.progress=false",
            "log.trackers=[]", f"policy.model={model}", f"engine.servers=[{','.join(urls)}]",
            "engine.server_timeout_s=5", "engine.server_wait_s=15"]
    return [sys.executable, "-m", "scalerl", "train", *[a for s in sets for a in ("--set", s)],
            "--run-dir", str(run_dir), *(["--resume"] if resume else [])]


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and any(json.loads(line).get("step", 0) >= step and "loss/value" in
                                    line for line in metrics.read_text().splitlines()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the run did not reach step {step} (exit {proc.poll()})")


def in_flight(url: str) -> float:
    """Requests the server's scheduler holds (running + waiting), from vLLM's own Prometheus
    gauges (the session's servers run with `--log-stats`). Exact at the last engine step, unlike
    vLLM's `/load` counter, which a request whose client goes away as it completes leaves
    counted (or, cancelled, counts off twice): a /load threshold could be met by an idle server,
    whose SIGKILL then has no request to issue again (a CI run failed so)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    gauges = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] in gauges)


def wait_busy(url: str, proc: subprocess.Popen, requests_at_least: int = 8) -> None:
    """Until the server's scheduler holds at least `requests_at_least` of the run's requests. A
    batch puts ~16 requests on each server, so at 8 most are still running."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if in_flight(url) >= requests_at_least:
            return
        time.sleep(0.01)
    raise AssertionError(f"{url} never had a request in flight (exit {proc.poll()})")


def test_training_survives_a_killed_server_then_stops_and_resumes_with_none_left(
        vllm_servers, tiny_model_path, tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command(run_dir, tiny_model_path, vllm_servers.urls),
                                stdout=out, stderr=subprocess.STDOUT, text=True)
        wait_for_step(run_dir, 2, proc)
        wait_busy(vllm_servers.urls[1], proc)
        vllm_servers.signal(1, signal.SIGKILL)
        wait_for_step(run_dir, 4, proc)
        vllm_servers.signal(0, signal.SIGSTOP)
        try:
            code = proc.wait(300)
        finally:
            vllm_servers.signal(0, signal.SIGCONT)
    text = log.read_text()
    assert code == 75, text[-3000:]
    assert "scalerl train: stopped at step" in text and "no vLLM server usable" in text, \
        text[-3000:]
    first = steps_of(run_dir)
    stopped = max(first)
    assert stopped >= 4 and (run_dir / "checkpoints" / f"step-{stopped:06d}").is_dir()
    assert first[stopped]["servers/reissued_total"] > 0, text[-3000:]  # the killed server's

    run_to_end(command(run_dir, tiny_model_path, vllm_servers.urls, resume=True))
    steps = steps_of(run_dir)
    assert sorted(steps) == list(range(1, STEPS + 1))
    kl = {step: row["policy/mismatch_kl"] for step, row in steps.items()
          if "policy/mismatch_kl" in row}
    assert len(kl) >= STEPS // 2, "too few optimizer steps"
    assert all(abs(value) < 1e-6 for value in kl.values()), kl
    for step, row in steps.items():
        assert row["async/batch_index"] == step - 1  # no batch repeated or skipped
