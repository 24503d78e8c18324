"""Real OpenEnv servers for tests: the guessing game (tests/envs/adapters/openenv_game.py) served
by openenv-core under uvicorn, one subprocess per server on a free loopback port.

Starting one takes ~7 s (openenv-core imports gradio); start several at once and then wait.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

GAME = Path(__file__).resolve().parent / "envs" / "adapters" / "openenv_game.py"


class GameServer:
    """One game server process: `action` text or int, at most `max_sessions` sessions."""

    def __init__(self, workdir: Path, action: str = "text", max_sessions: int = 16) -> None:
        name = uuid.uuid4().hex[:8]
        self.port_file, self.log = workdir / f"{name}.port", workdir / f"{name}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(GAME), "--action", action, "--max-sessions",
                 str(max_sessions), "--port-file", str(self.port_file)],
                stdout=log, stderr=subprocess.STDOUT)
        self.url = ""

    def wait_ready(self, timeout: float = 180) -> GameServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server exited: {self.log.read_text()[-2000:]}"
            if self.port_file.exists() and self.port_file.read_text():
                self.url = f"http://127.0.0.1:{self.port_file.read_text()}"
                try:
                    if get(self.url, "/health")["status"] == "healthy":
                        return self
                except OSError:
                    pass
            time.sleep(0.2)
        raise AssertionError(f"server not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def live(self) -> int:
        """Environment instances the server holds (its open sessions)."""
        return get(self.url, "/test/live")["live"]

    def wait_live(self, n: int, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while self.live() != n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.live()

    def stop(self) -> None:
        """SIGKILL (a server that dies mid-episode); idempotent."""
        self.proc.kill()
        self.proc.wait(timeout=30)


def get(url: str, path: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url + path, timeout=10) as resp:
        return json.loads(resp.read())
