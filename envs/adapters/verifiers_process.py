"""The verifiers runner process: started in `.venv-verifiers`, spoken to in JSON lines.

`RunnerProcess` starts `envs/adapters/verifiers_runner.py` with verifiers' own venv's Python
(`runner_python`: `$SCALERL_VERIFIERS_PYTHON`, else `.venv-verifiers/bin/python` at the
repository root, which `make install` builds), its bin directory first on PATH (the harness's
chat program is a uv script), its stderr in a log file (removed when it ends cleanly). `start`
waits for the runner's ready line (its taskset loaded and served) and raises `RunnerFailed` with
the log's tail otherwise;
`submit` sends a request and returns a Future of the reply, resolved by a reader thread, so many
episodes share one process. If the process dies, every pending request fails with
`RunnerFailed` naming its exit code and log, and the next `submit` starts a new one. Nothing
here knows verifiers' types or scalerl's generator.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import tempfile
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("verifiers_runner.py")
VENV = ROOT / ".venv-verifiers"
START_TIMEOUT_S = 300.0
"""Loading verifiers, the taskset and its env server (a few seconds; more on a cold disk)."""


class RunnerFailed(RuntimeError):
    """The runner could not start, or died, or answered a request with an error."""


def runner_python() -> Path:
    """The Python that runs verifiers: `$SCALERL_VERIFIERS_PYTHON`, else the venv's."""
    return Path(os.environ.get("SCALERL_VERIFIERS_PYTHON") or VENV / "bin" / "python")


def missing_runner() -> str | None:
    """One line naming the fix when verifiers' venv is not there, else None."""
    python = runner_python()
    if python.exists():
        return None
    return (f"verifiers tasksets run in their own venv, and {python} is missing: run `make "
            "install` (it builds .venv-verifiers), or set SCALERL_VERIFIERS_PYTHON to a Python "
            "with verifiers==0.4.0")


class RunnerProcess:
    """One runner process for one taskset's settings `config` (module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[subprocess.Popen, Future]] = {}
        self._ids = itertools.count(1)
        self._tail: deque[str] = deque(maxlen=20)
        self.log_path: Path | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Start the process (if not running) and return its ready line's facts."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return self.ready
            problem = missing_runner()
            if problem:
                raise RunnerFailed(problem)
            self._spawn()
            first: Future = Future()
            self._pending[0] = (self.proc, first)
            threading.Thread(target=self._read, args=(self.proc,), daemon=True,
                             name="verifiers-runner").start()
        try:
            reply = first.result(timeout_s)
        except TimeoutError:
            self.close()
            raise RunnerFailed(f"the verifiers runner did not start within {timeout_s:.0f} s "
                               f"(log: {self.log_path})") from None
        self.ready = reply.get("ready") or {}
        return self.ready

    def _spawn(self) -> None:
        python = runner_python()
        fd, name = tempfile.mkstemp(prefix="scalerl-verifiers-", suffix=".log")
        self.log_path = Path(name)
        env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("PYTHONPATH", None)  # scalerl's venv's packages must not leak into verifiers'
        env.pop("VIRTUAL_ENV", None)
        try:
            self.proc = subprocess.Popen(
                [str(python), "-I", str(RUNNER), "--config", json.dumps(self.config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, env=env, text=True,
                bufsize=1)
        finally:
            os.close(fd)

    def _read(self, proc: subprocess.Popen) -> None:
        """Resolve each reply's Future; when the process ends, fail what is still pending."""
        for line in proc.stdout:
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                self._tail.append(line.rstrip())
                continue
            with self._lock:
                proc_future = self._pending.pop(reply.get("id"), None)
            if proc_future is None:
                continue
            future = proc_future[1]
            if reply.get("ok"):
                future.set_result(reply)
            else:
                future.set_exception(RunnerFailed(f"verifiers runner: {reply.get('error')}"))
        code = proc.wait()
        if code == 0 and self.log_path is not None:  # a clean end: keep only failures' logs
            self.log_path.unlink(missing_ok=True)
        failure = RunnerFailed(f"the verifiers runner exited with code {code}: "
                               f"{self.log_tail()} (log: {self.log_path})")
        with self._lock:
            mine = [rid for rid, (p, _) in self._pending.items() if p is proc]
            pending = [self._pending.pop(rid)[1] for rid in mine]
        for future in pending:
            if not future.done():
                future.set_exception(failure)

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of the runner's log (its stderr), on one line."""
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            text = ""
        tail = [s.strip() for s in text.strip().splitlines()[-lines:] if s.strip()]
        return " | ".join(tail)[-600:] or "(no output)"

    def submit(self, op: str, **fields: Any) -> tuple[int, Future]:
        """Send request `op` (starting the process if needed); its id and the reply's Future."""
        self.start()
        with self._lock:
            rid = next(self._ids)
            future: Future = Future()
            proc = self.proc
            self._pending[rid] = (proc, future)
        try:
            proc.stdin.write(json.dumps({"id": rid, "op": op, **fields}) + "\n")
            proc.stdin.flush()
        except (OSError, ValueError) as exc:
            with self._lock:
                self._pending.pop(rid, None)
            future.set_exception(RunnerFailed(f"the verifiers runner is gone ({exc}): "
                                              f"{self.log_tail()} (log: {self.log_path})"))
        return rid, future

    def cancel(self, rid: int) -> None:
        """Ask the runner to abandon request `rid` (best effort)."""
        proc = self.proc
        try:
            if proc is not None and proc.poll() is None:
                proc.stdin.write(json.dumps({"op": "cancel", "target": rid}) + "\n")
                proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def close(self, timeout_s: float = 10.0) -> None:
        """End the process: its stdin closed (it stops its episodes and exits), then killed."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
