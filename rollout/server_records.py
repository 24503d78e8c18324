"""What a run leaves on disk about the local vLLM servers it started, and the directories they use.

A record (`local-servers/<host>-<token>.json` under the scalerl cache: $SCALERL_CACHE, default
~/.cache/scalerl) is written for every local server started and removed when it is stopped. It names
the run's process (pid and start time) and the server's token, an environment variable every process
of that server carries (`TOKEN_VAR`: the guard, the API server, its engine core and workers inherit
it). `sweep` is what a later start does first: for each record of this host whose run is gone, it
stops the processes that carry the record's token (SIGTERM, SIGKILL after a grace) and removes the
record and the server's log file. Leftovers are rare (rollout/server_guard.py ends a server with its
run), but a guard that was itself SIGKILLed leaves its server; a process is stopped only when its
own environment carries the token, never for its pid alone, and a run that is alive (another run on
this host) keeps its servers.

`claim_cache_dir` gives each local server a vLLM cache root of its own (VLLM_CACHE_ROOT: vLLM
0.32 writes its torch.compile cache, inductor's and triton's under it: vllm/envs.py,
vllm/compilation/backends.py), so servers starting together never compile into one directory at
once: `<root>/scalerl-server-<i>` for the i-th server, held under a file lock while it runs (a
second run on the host takes `.1`, `.2`, ...), and kept, so the next run's server i reuses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

TOKEN_VAR = "SCALERL_LOCAL_SERVER"
"""The environment variable that marks every process of one local server (its record's token)."""


def records_dir() -> Path:
    base = os.environ.get("SCALERL_CACHE") or Path.home() / ".cache" / "scalerl"
    return Path(base) / "local-servers"


def _started(pid: int) -> float | None:
    """When process `pid` started (psutil's create_time), None if there is none."""
    import psutil

    try:
        return round(psutil.Process(pid).create_time(), 2)
    except psutil.Error:
        return None


def write_record(directory: Path, token: str, server: dict) -> Path:
    """Record a local server this process started (`server`: what identifies it to a reader:
    url, guard pid, command); the path to remove when it is stopped."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{socket.gethostname()}-{token}.json"
    owner = os.getpid()
    path.write_text(json.dumps({"token": token, "owner": owner, "owner_started": _started(owner),
                                **server}))
    return path


def carriers(token: str) -> list[int]:
    """This user's processes whose environment carries `token` (others' cannot be read)."""
    import psutil

    pids = []
    for proc in psutil.process_iter(["environ", "status"]):
        env = proc.info["environ"] or {}
        if env.get(TOKEN_VAR) == token and proc.info["status"] != psutil.STATUS_ZOMBIE:
            pids.append(proc.pid)
    return pids


def sweep(directory: Path, grace_s: float) -> list[str]:
    """Stop the leftovers of every record of this host whose run is gone, and remove those
    records; one line per leftover server stopped."""
    from scalerl.rollout.process_tree import stop_processes

    lines = []
    for path in sorted(directory.glob(f"{socket.gethostname()}-*.json")):
        try:
            record = json.loads(path.read_text())
            token, owner, started = record["token"], record["owner"], record["owner_started"]
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)  # unreadable: nothing in it can be trusted
            continue
        if started is not None and _started(owner) == started:
            continue  # its run is alive: its servers are its own
        if pids := carriers(token):
            stop_processes(set(pids), grace_s)
            lines.append(f"stopped {len(pids)} process(es) of a local vLLM server left by a "
                         f"run that is gone (pid {owner}; {record.get('url', '?')}, "
                         f"{path.name})")
        if log := record.get("log"):  # its output, which that run never copied or removed
            Path(log).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    return lines


def vllm_cache_root() -> Path:
    """vLLM's cache root as vLLM 0.32 finds it (vllm/envs.py: VLLM_CACHE_ROOT, else
    $XDG_CACHE_HOME/vllm, else ~/.cache/vllm)."""
    if root := os.environ.get("VLLM_CACHE_ROOT"):
        return Path(root).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "vllm"


def claim_cache_dir(root: Path, index: int) -> tuple[Path, int]:
    """The first of `root/scalerl-server-<index>`, `.1`, `.2`, ... that no running server holds,
    and the open lock file that holds it (close it when the server is stopped)."""
    n = 0
    while True:
        path = root / (f"scalerl-server-{index}" + (f".{n}" if n else ""))
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return path, fd
        except BlockingIOError:
            os.close(fd)
            n += 1


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
