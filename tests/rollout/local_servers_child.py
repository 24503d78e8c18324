"""A run's two local vLLM servers in a process of their own, for
tests/rollout/test_local_server_restarts.py to SIGKILL: `python local_servers_child.py MODEL`
starts a LocalServerGenerator on 2 servers, publishes weights with a zero LM head (version 1),
SIGKILLs server 0's API process and waits until it is restarted and has rejoined, then prints one
JSON line (what the test checks) and sleeps until it is killed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil
import requests
from tiny_rollouts import checkpoint, uniform_logprob, zero_head

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.local_servers import LocalServerGenerator


def group(pgid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc)
        except (OSError, psutil.Error):
            continue
    return out


def main(model: str) -> None:
    config = EngineConfig(dtype="float32", kv_cache_gib=1.0, memory_fraction=0.1,
                          max_model_len=1024, seed=0, data_parallel_size=2,
                          server_timeout_s=5.0, server_wait_s=600.0)
    gen = LocalServerGenerator(model, config=config)
    base = checkpoint(model)
    gen.update_weights(zero_head(base), 1)
    guard = psutil.Process(gen.local.procs[0].pid)
    (api,) = guard.children()
    api.send_signal(signal.SIGKILL)  # server 0 dies (its engine core is left to the guard)
    server = gen.pool.servers[0]
    deadline = time.monotonic() + 600
    while not (server.up and server.joined == 2) and time.monotonic() < deadline:
        time.sleep(1)
    body = {"token_ids": list(range(5, 30)), "cache_salt": "probe", "sampling_params": {
        "temperature": 1.0, "max_tokens": 8, "seed": 3, "logprobs": 0, "detokenize": False}}
    reply = requests.post(f"{server.url}/inference/v1/generate", json=body, timeout=60).json()
    choice = reply["choices"][0]
    caches = [psutil.Process(p.pid).children()[0].environ()["VLLM_CACHE_ROOT"]
              for p in gen.local.procs]
    print(json.dumps({
        "up": [s.up for s in gen.pool.servers], "joined": server.joined,
        "metrics": gen.metrics(), "uniform": uniform_logprob(base),
        "logprobs": [c["logprob"] for c in choice["logprobs"]["content"]],
        "versions": [s["version"] for s in choice["weight_versions"]],
        "label": requests.get(f"{server.url}/weight_info", timeout=30).json()["weight_version"],
        "caches": caches, "ports": gen.local.ports, "logs": [str(p) for p in gen.local._logs],
        "pids": [[p.pid, p.create_time()] for g in gen.local.procs for p in group(g.pid)]}),
        flush=True)
    time.sleep(3600)  # until the test SIGKILLs this process


if __name__ == "__main__":
    main(sys.argv[1])
