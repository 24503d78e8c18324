"""Several vLLM engines on one node without starting `scalerl serve` by hand: a run's local
servers (`engine.data_parallel_size` > 1).

`LocalServers` starts `data_parallel_size` vLLM servers with the command `scalerl serve` runs
(rollout/server_command.py: the engine's own arguments, the RL routes), each in its own process
group on a free loopback port and, on GPUs, on its own `tensor_parallel_size` GPUs of the
CUDA_VISIBLE_DEVICES it was started under (in order); it waits until every one answers
`/health` (one that exits or does not answer in time stops them all, with the tail of its
output), and stops every group when closed. `LocalServerGenerator` is the ServerGenerator over
them that also stops them when it closes: everything else (routing, weights by files or NCCL,
faults) is the servers' path (rollout/server_generator.py). Their output goes where this
process's stderr goes (a run's engine.log).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_command import server_command
from scalerl.rollout.server_generator import ServerGenerator

STOP_TIMEOUT_S = 60.0
"""Seconds a stopped server's processes get after SIGTERM before SIGKILL."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_devices(visible: str | None, count: int, tp: int) -> list[str | None]:
    """Each server's CUDA_VISIBLE_DEVICES: consecutive `tp` of `visible` (None on CPU, or when
    nothing is set: every server then sees what this process sees)."""
    if not visible:
        return [None] * count
    ids = [d.strip() for d in visible.split(",") if d.strip()]
    if len(ids) < count * tp:
        raise ValueError(f"{count} local servers of tensor_parallel_size {tp} need {count * tp} "
                         f"GPUs, CUDA_VISIBLE_DEVICES has {len(ids)} ({visible})")
    return [",".join(ids[i * tp:(i + 1) * tp]) for i in range(count)]


class LocalServers:
    """`config.data_parallel_size` vLLM servers of `model` on this machine, started at once."""

    def __init__(self, model: str, config: EngineConfig, *, fp32_head: bool) -> None:
        start_timeout_s = config.start_timeout_s  # every server must answer /health by then
        count = config.data_parallel_size or 1
        self.ports = [free_port() for _ in range(count)]
        self.procs: list[subprocess.Popen] = []
        self._logs: list[Path] = []
        devices = split_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), count,
                                config.tensor_parallel_size)
        alone = dataclasses.replace(config, servers=(), data_parallel_size=1)
        try:
            for port, gpus in zip(self.ports, devices, strict=True):
                self._start(server_command(alone, model, port=port, fp32_head=fp32_head), gpus)
            self._wait(time.monotonic() + start_timeout_s, start_timeout_s)
        except BaseException:
            self.close()
            raise
        where = "" if devices[0] is None else f" (GPU {'; '.join(devices)})"
        print(f"local vLLM servers: {', '.join(self.urls)}{where}", file=sys.stderr, flush=True)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(f"http://127.0.0.1:{port}" for port in self.ports)

    def _start(self, command, gpus: str | None) -> None:
        env = {**os.environ, **command.env}
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        log = Path(tempfile.mkstemp(prefix="scalerl-server-", suffix=".log")[1])
        self._logs.append(log)
        with log.open("ab") as out:  # the server keeps the file; its tail explains a failure
            self.procs.append(subprocess.Popen([sys.executable, *command.argv], env=env,
                                               stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def _wait(self, deadline: float, timeout_s: float) -> None:
        waiting = set(range(len(self.procs)))
        while waiting:
            for i in sorted(waiting):
                if self.procs[i].poll() is not None:
                    raise RuntimeError(f"local vLLM server {i} ({self.urls[i]}) exited with "
                                       f"{self.procs[i].returncode} before answering /health: "
                                       f"{self._tail(i)}")
                if _healthy(self.urls[i]):
                    waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"local vLLM server(s) {sorted(waiting)} did not answer "
                                   f"/health within {timeout_s:.0f} s: {self._tail(min(waiting))}")
            time.sleep(0.5)

    def _tail(self, i: int) -> str:
        text = self._logs[i].read_text(errors="replace")[-1500:]
        return " | ".join(line for line in text.splitlines() if line.strip())[-1000:]

    def close(self) -> None:
        """Stop every server's process group (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and
        copy each one's output to this process's stderr."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group's engine core and workers too
            proc.wait()
        for log in self._logs:
            with contextlib.suppress(OSError):
                sys.stderr.write(log.read_text(errors="replace"))
                log.unlink()
        self.procs, self._logs = [], []


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


class LocalServerGenerator(ServerGenerator):
    """The ServerGenerator over a run's own local servers, which it starts and stops."""

    def __init__(self, model_path: str, *, config: EngineConfig, fp32_head: bool = True,
                 **kwargs) -> None:
        self.local = LocalServers(model_path, config, fp32_head=fp32_head)
        try:
            super().__init__(model_path, config=dataclasses.replace(config,
                                                                    servers=self.local.urls),
                             fp32_head=fp32_head, **kwargs)
        except BaseException:
            self.local.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.local.close()
