"""Several vLLM engines on one node without starting `scalerl serve` by hand: a run's local
servers (`engine.data_parallel_size` > 1).

`LocalServers` starts `data_parallel_size` vLLM servers with the command `scalerl serve` runs
(rollout/server_command.py: the engine's own arguments, the RL routes), each under a guard
(rollout/server_guard.py) that leads the server's own process group and ends it when this
process is gone (SIGKILLed by torchrun, say) or when the server exits; each on a free loopback
port, with a vLLM cache of its own (its compile cache: rollout/server_records.py) and, on GPUs,
on its own `tensor_parallel_size` GPUs of the CUDA_VISIBLE_DEVICES it was started under (in
order). Before starting, it stops what a run that is gone left (its records); it waits until
every server answers `/health` (one that exits or does not answer in time stops them all, with
the tail of its output), and stops every group when closed.

`LocalServerGenerator` is the ServerGenerator over them that restarts a server that died (when
the pool tries to bring it back: it rejoins with the current weights and version, as a server
that was lost does) up to `engine.local_server_restarts` times, then gives up on it loudly
(`ServerGone`; the run stops once none is left), and stops them when it closes: everything
else (routing, weights by files or NCCL, faults) is the servers' path
(rollout/server_generator.py). Their output goes where this process's stderr goes (a run's
engine.log).
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
import uuid
from pathlib import Path

from scalerl.rollout import server_records as records
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.fd_limit import fds_needed, raise_fd_limit
from scalerl.rollout.server_command import server_command
from scalerl.rollout.server_generator import ServerGenerator
from scalerl.rollout.server_pool import Server, ServerError, ServerGone

STOP_TIMEOUT_S = 60.0
"""Seconds a stopped server's processes get after SIGTERM before SIGKILL."""
GUARD_GRACE_S = 30.0
"""Seconds a server's guard gives it after SIGTERM, once the run is gone or the server's API
process exited, before it SIGKILLs the rest of the group (vLLM's workers take up to
WORKER_SHUTDOWN_GRACE_S, 30 s, to exit: rollout/engine_config.py)."""


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
        self.restarts = [0] * count
        """Times each server was started again after it died."""
        self._logs: list[Path] = []
        self._argv: list[list[str]] = []
        self._env: list[dict[str, str]] = []
        self._records: list[Path | None] = [None] * count
        self._locks: list[int] = []
        devices = split_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), count,
                                config.tensor_parallel_size)
        alone = dataclasses.replace(config, servers=(), data_parallel_size=1)
        # before minutes of start-up: refused now if the run's client cannot hold its
        # connections; the servers inherit the raised limit
        raise_fd_limit(fds_needed(count, config.requests_per_server),
                       f"a run's client of {count} local vLLM servers")
        for line in records.sweep(records.records_dir(), GUARD_GRACE_S):
            print(f"local vLLM servers: {line}", file=sys.stderr, flush=True)
        try:
            for i, (port, gpus) in enumerate(zip(self.ports, devices, strict=True)):
                command = server_command(alone, model, port=port, fp32_head=fp32_head)
                cache, lock = records.claim_cache_dir(records.vllm_cache_root(), i)
                self._locks.append(lock)
                env = {**os.environ, **command.env, "VLLM_CACHE_ROOT": str(cache)}
                if gpus is not None:
                    env["CUDA_VISIBLE_DEVICES"] = gpus
                self._argv.append([sys.executable, *command.argv])
                self._env.append(env)
                self._logs.append(Path(tempfile.mkstemp(prefix="scalerl-server-",
                                                        suffix=".log")[1]))
                self._start(i)
            self._wait(time.monotonic() + start_timeout_s, start_timeout_s)
        except BaseException:
            self.close()
            raise
        where = "" if devices[0] is None else f" (GPU {'; '.join(devices)})"
        print(f"local vLLM servers: {', '.join(self.urls)}{where}", file=sys.stderr, flush=True)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(f"http://127.0.0.1:{port}" for port in self.ports)

    def _start(self, i: int) -> None:
        """Start server i under its guard, with a token of its own in its environment and a
        record of it (rollout/server_records.py)."""
        token = uuid.uuid4().hex
        guard = [sys.executable, "-m", "scalerl.rollout.server_guard", "--parent",
                 str(os.getpid()), "--grace", str(GUARD_GRACE_S), "--"]
        with self._logs[i].open("ab") as out:  # the server keeps the file; its tail explains
            proc = subprocess.Popen([*guard, *self._argv[i]],  # a failure
                                    env={**self._env[i], records.TOKEN_VAR: token},
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)
        self._records[i] = records.write_record(records.records_dir(), token, {
            "url": self.urls[i], "guard": proc.pid, "command": self._argv[i],
            "log": str(self._logs[i])})

    def alive(self, i: int) -> bool:
        """Whether server i's guard is still running (the server, or its clean-up)."""
        return self.procs[i].poll() is None

    def restart(self, i: int) -> int | None:
        """Start server i again once it is gone (non-blocking: it answers /health minutes
        later); the exit code it ended with."""
        code = self.procs[i].poll()
        self._forget(i)
        self.restarts[i] += 1
        self._start(i)
        return code

    def kill(self, i: int) -> None:
        """SIGKILL every process of server i (non-blocking)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[i].pid, signal.SIGKILL)

    def _forget(self, i: int) -> None:
        if (path := self._records[i]) is not None:
            path.unlink(missing_ok=True)
            self._records[i] = None

    def _wait(self, deadline: float, timeout_s: float) -> None:
        waiting = set(range(len(self.procs)))
        while waiting:
            for i in sorted(waiting):
                if self.procs[i].poll() is not None:
                    raise RuntimeError(f"local vLLM server {i} ({self.urls[i]}) exited with "
                                       f"{self.procs[i].returncode} before answering /health: "
                                       f"{self.tail(i)}")
                if _healthy(self.urls[i]):
                    waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"local vLLM server(s) {sorted(waiting)} did not answer "
                                   f"/health within {timeout_s:.0f} s: {self.tail(min(waiting))}")
            time.sleep(0.5)

    def tail(self, i: int) -> str:
        """The last lines of server i's output, on one line."""
        text = self._logs[i].read_text(errors="replace")[-1500:]
        return " | ".join(line for line in text.splitlines() if line.strip())[-1000:]

    def close(self) -> None:
        """Stop every server's process group (SIGTERM, then SIGKILL after STOP_TIMEOUT_S), copy
        each one's output to this process's stderr, and remove their records."""
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
        for i in range(len(self.procs)):
            self._forget(i)
        for log in self._logs:
            with contextlib.suppress(OSError):
                sys.stderr.write(log.read_text(errors="replace"))
                log.unlink()
        for lock in self._locks:
            records.release(lock)
        self.procs, self._logs, self._locks = [], [], []


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


class LocalServerGenerator(ServerGenerator):
    """The ServerGenerator over a run's own local servers, which it starts, restarts when they
    die, and stops."""

    def __init__(self, model_path: str, *, config: EngineConfig, fp32_head: bool = True,
                 **kwargs) -> None:
        self.local = LocalServers(model_path, config, fp32_head=fp32_head)
        self._starting: dict[int, float] = {}
        """Restarted servers not joined yet -> when they must answer (start_timeout_s)."""
        try:
            super().__init__(model_path, config=dataclasses.replace(config,
                                                                    servers=self.local.urls),
                             fp32_head=fp32_head, **kwargs)
        except BaseException:
            self.local.close()
            raise

    async def _join(self, server: Server) -> None:
        """Restart the server first if it died (ServerError: the pool tries again, with backoff,
        while it starts), then join it as any server."""
        self._revive(server)
        await super()._join(server)
        self._starting.pop(server.index, None)

    def _revive(self, server: Server) -> None:
        i, local, limit = server.index, self.local, self.config.local_server_restarts
        if local.alive(i):
            if time.monotonic() <= self._starting.get(i, float("inf")):
                return  # running (or still starting): the join says whether it answers
            local.kill(i)
            raise ServerError(f"{server.url}: restarted local vLLM server {i} did not answer "
                              f"within {self.config.start_timeout_s:.0f} s "
                              "(engine.start_timeout_s): killed it")
        if self.config.weight_transfer == "nccl":
            raise ServerGone(f"{server.url}: local vLLM server {i} died; the nccl transport "
                             "cannot bring a server back into its group (files can): "
                             f"{local.tail(i)}")
        if local.restarts[i] >= limit:
            raise ServerGone(f"{server.url}: local vLLM server {i} died {limit + 1} times "
                             f"(engine.local_server_restarts = {limit}): giving up on it; the "
                             f"last lines of its output: {local.tail(i)}")
        code = local.restart(i)
        self._starting[i] = time.monotonic() + self.config.start_timeout_s
        raise ServerError(f"{server.url}: local vLLM server {i} exited with {code}; restarted it "
                          f"({local.restarts[i]} of at most {limit} restarts), waiting for it")

    def metrics(self) -> dict[str, float]:
        return super().metrics() | {"servers/restarted_total": float(sum(self.local.restarts))}

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.local.close()
