"""Real vLLM servers for tests: `scalerl serve` processes on loopback ports.

Each server runs in its own process group (so a test can SIGKILL or SIGSTOP the whole server:
API process, engine core and worker), logs to a file in `log_dir`, and is started by the very
command users run. `stop_all` ends every group and checks that none of their processes is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from scalerl.rollout.local_servers import free_port


class ServerSet:
    """`count` servers of `model`, started together (a vLLM server takes ~70 s on 2 cores)."""

    def __init__(self, model: str, count: int, log_dir: Path, *extra: str):
        self.model, self.log_dir, self.extra = model, Path(log_dir), extra
        self.ports = [free_port() for _ in range(count)]
        self.procs: list[subprocess.Popen | None] = [None] * count

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def log(self, i: int) -> Path:
        return self.log_dir / f"server-{i}.log"

    def start(self, i: int) -> None:
        cmd = [sys.executable, "-m", "scalerl", "serve", "--model", self.model, "--port",
               str(self.ports[i]), *self.extra]
        with self.log(i).open("ab") as log:
            self.procs[i] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                             start_new_session=True, text=True)

    def wait(self, i: int, timeout_s: float = 900.0) -> None:
        """Until server i printed its URL (it answers /health); its log's tail if it fails."""
        proc = self.procs[i]
        deadline = time.monotonic() + timeout_s
        line = ""
        while not line and proc.poll() is None and time.monotonic() < deadline:
            line = proc.stdout.readline().strip()
        if line != self.urls[i]:
            tail = self.log(i).read_text()[-3000:]
            raise RuntimeError(f"server {i} did not start (printed {line!r}, exit "
                               f"{proc.poll()}):\n{tail}")

    def start_all(self) -> None:
        for i in range(len(self.ports)):
            self.start(i)
        for i in range(len(self.ports)):
            self.wait(i)

    def signal(self, i: int, sig: int) -> None:
        """`sig` to every process of server i."""
        os.killpg(self.procs[i].pid, sig)

    def signal_engine(self, i: int, sig: int) -> None:
        """`sig` to server i's engine processes (engine core, workers), not its API server: with
        SIGSTOP its requests stay in flight while its HTTP side (/health, /metrics) answers."""
        for proc in self.group(i):
            if proc.pid != self.procs[i].pid:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(sig)

    def group(self, i: int) -> list[psutil.Process]:
        return [p for p in psutil.process_iter() if _pgid(p) == self.procs[i].pid]

    def stop_all(self) -> list[str]:
        """End every server's group; the processes still alive after that (should be none)."""
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            self.signal_quietly(i, signal.SIGCONT)
            self.signal_quietly(i, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))  # reaps the server itself
            while self.group(i) and time.monotonic() < deadline:  # its engine processes
                time.sleep(0.2)
            self.signal_quietly(i, signal.SIGKILL)
            proc.wait()
        time.sleep(1)
        return [f"{p.pid} {p.name()}" for i in range(len(self.procs)) if self.procs[i]
                for p in self.group(i)]

    def signal_quietly(self, i: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.signal(i, sig)


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, psutil.Error):
        return None
