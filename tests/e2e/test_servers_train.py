"""`scalerl train` on two real vLLM servers (the session's `vllm_servers`, on loopback).

One server is SIGKILLed after step 2 while it certainly holds requests: once its gauges at
`/metrics` show a request, its engine processes are stopped (SIGSTOP) and, if the gauges then
still count some, the whole server is killed. Its rollouts are issued again on the other and
every step is trained, with the
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
from serverset import ServerSet

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
    """Requests the server's scheduler holds (running + waiting) at its last engine step, from
    vLLM's own Prometheus gauges (the session's servers run with `--log-stats`)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    gauges = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] in gauges)


def kill_holding_requests(servers: ServerSet, i: int, proc: subprocess.Popen) -> float:
    """SIGKILL server i while requests of the run are in flight on it; how many.

    The tiny model answers a request in ~0.1 s, less than the time between reading the gauges
    and a kill, so a busy reading alone can meet a server that has just finished (CI runs failed
    so, twice). Here the engine is stopped first: no request can finish then, and the gauges,
    read again once the API server has taken in what the engine sent before it stopped, count
    requests that no client has had an answer to. None left: the engine goes on and the next
    busy reading is tried."""
    url = servers.urls[i]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if in_flight(url) >= 1:
            servers.signal_engine(i, signal.SIGSTOP)
            time.sleep(0.5)
            held = in_flight(url)
            if held >= 1:
                servers.signal(i, signal.SIGKILL)
                return held
            servers.signal_engine(i, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"{url} never held a request of the run (exit {proc.poll()})")


def last_step(run_dir: Path) -> int:
    return max(steps_of(run_dir), default=0)


def test_training_survives_a_killed_server_then_stops_and_resumes_with_none_left(
        vllm_servers, tiny_model_path, tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command(run_dir, tiny_model_path, vllm_servers.urls),
                                stdout=out, stderr=subprocess.STDOUT, text=True)
        wait_for_step(run_dir, 2, proc)
        held = kill_holding_requests(vllm_servers, 1, proc)
        # The killed batch is at most two steps after the last one written: trained before the
        # other server goes.
        wait_for_step(run_dir, max(4, last_step(run_dir) + 2), proc)
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
    assert first[stopped]["servers/reissued_total"] >= held, text[-3000:]  # the killed server's

    run_to_end(command(run_dir, tiny_model_path, vllm_servers.urls, resume=True))
    steps = steps_of(run_dir)
    assert sorted(steps) == list(range(1, STEPS + 1))
    kl = {step: row["policy/mismatch_kl"] for step, row in steps.items()
          if "policy/mismatch_kl" in row}
    assert len(kl) >= STEPS // 2, "too few optimizer steps"
    assert all(abs(value) < 1e-6 for value in kl.values()), kl
    for step, row in steps.items():
        assert row["async/batch_index"] == step - 1  # no batch repeated or skipped
