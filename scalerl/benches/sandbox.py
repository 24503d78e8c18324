"""`scalerl bench sandbox`: sandboxed programs per second per backend beside bare subprocesses.

The baseline is the same program run as a bare `python3 -I -c` subprocess (no isolation), with the
same concurrency, measured in interleaved rounds in the same run so machine load hits both alike.
Beside each backend's single runs: tool calls per second on warm tool sessions (sandbox/session.py,
one persistent interpreter per worker, the same computation as a call) in the same rounds, their
ratio to the single runs, and one session's cold start (`bwrap-cold` shares bwrap's sessions).
Also reports the grader's resident memory before and after `--rss-runs` sandboxed programs (a
leak in the grader would show there). Not measured: docker container start (the pool is warmed
first; `docker_cold_start_s` reports one start separately).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scalerl.benches import positive_int

PROGRAM = "import sys\nn = int(sys.stdin.read())\nprint(sum(i * i for i in range(n)))\n"
TOOL_CODE = "n = 1000\nprint(sum(i * i for i in range(n)))\n"
"""PROGRAM as a tool call (the session has no stdin)."""
STDIN = b"1000"
EXPECTED = str(sum(i * i for i in range(1000))).encode() + b"\n"

HELP = "sandboxed programs/s per backend vs bare python subprocesses, plus grader RSS"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=positive_int, default=200,
                        help="programs per backend (default 200)")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                        help="concurrent programs (default: CPU count)")
    parser.add_argument("--rounds", type=positive_int, default=4,
                        help="interleaved rounds (default 4)")
    parser.add_argument("--rss-runs", type=int, default=1000,
                        help="programs run while watching grader RSS (default 1000; 0 = skip)")
    parser.add_argument("--backend", action="append",
                        help="backend(s) to measure (default: bwrap, bwrap-cold, docker where "
                             "available)")
    parser.add_argument("--rss-backend", help="backend for the RSS check (default: the first)")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _bare_one(_: int) -> bool:
    done = subprocess.run(["/usr/bin/python3", "-I", "-c", PROGRAM], input=STDIN,
                          capture_output=True, timeout=60)
    return done.stdout == EXPECTED


def _timed(fn, n: int, workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        good = sum(ex.map(fn, range(n)))
    return time.perf_counter() - start, good


def _sandboxed(backend):
    from scalerl.sandbox import Limits

    limits = Limits(wall_s=30, cpu_s=30)

    def one(_: int) -> bool:
        r = backend.run(["python", "-c", PROGRAM], stdin=STDIN, limits=limits)
        return r.status == "ok" and r.stdout == EXPECTED
    return one


def _tool_calls(pool, workers: int):
    """A function running TOOL_CODE on one of `workers` warm sessions of `pool` (each used by one
    thread at a time; closing the pool closes them)."""
    import queue

    sessions: queue.SimpleQueue = queue.SimpleQueue()
    opened = [pool.acquire() for _ in range(workers)]
    for session in opened:
        sessions.put(session)

    def one(_: int) -> bool:
        session = sessions.get()
        try:
            out = session.run(TOOL_CODE)
        finally:
            sessions.put(session)
        return out.status == "ok" and out.output.encode() == EXPECTED
    return one


def _session_cold_start_s(name: str) -> float:
    from scalerl.sandbox.session import SessionLimits
    from scalerl.sandbox.session_launch import Sandbox

    limits = SessionLimits(call_s=30)
    start = time.perf_counter()
    box = Sandbox.start(name, limits.sandbox_limits(), limits.call_s, limits.capture_bytes)
    took = time.perf_counter() - start
    box.kill()
    return round(took, 3)


def measure(names: list[str], n: int, workers: int, rounds: int) -> dict:
    from scalerl.sandbox import SandboxConfig, get_backend
    from scalerl.sandbox.session import SessionLimits, SessionPool

    backends = {name: get_backend(name) for name in names}
    fns = {"baseline": _bare_one, **{k: _sandboxed(b) for k, b in backends.items()}}
    tool_names = [k for k in names if k != "bwrap-cold" or "bwrap" not in names]
    pools = {k: SessionPool(SandboxConfig(backend=k), SessionLimits(call_s=30), warm=0)
             for k in tool_names}
    try:
        for k, pool in pools.items():
            fns[f"tool:{k}"] = _tool_calls(pool, workers)
        out = _measure_rounds(fns, backends, n, workers, rounds)
    finally:
        for pool in pools.values():
            pool.close()
    for k in tool_names:
        row = out["backends"][k]
        row["session_cold_start_s"] = _session_cold_start_s(k)
    return out


def _measure_rounds(fns: dict, backends: dict, n: int, workers: int, rounds: int) -> dict:
    for fn in fns.values():  # warm-up: docker containers, page cache, cgroup parents
        _timed(fn, workers, workers)
    totals = {k: [0.0, 0] for k in fns}
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        for key, fn in fns.items():
            secs, good = _timed(fn, per_round, workers)
            totals[key][0] += secs
            totals[key][1] += good
    base = per_round * rounds / totals["baseline"][0]
    out = {"baseline_runs_per_s": round(base, 2), "workers": workers, "n": per_round * rounds,
           "backends": {}}
    for key in backends:
        rate = per_round * rounds / totals[key][0]
        out["backends"][key] = {"runs_per_s": round(rate, 2), "ratio": round(rate / base, 3),
                                "correct": totals[key][1]}
        if f"tool:{key}" in totals:
            calls = per_round * rounds / totals[f"tool:{key}"][0]
            out["backends"][key].update(tool_calls_per_s=round(calls, 2),
                                        tool_vs_runs=round(calls / rate, 2),
                                        tool_correct=totals[f"tool:{key}"][1])
    out["baseline_correct"] = totals["baseline"][1]
    return out


def measure_rss(name: str, runs: int, workers: int) -> dict:
    from scalerl.sandbox import get_backend

    fn = _sandboxed(get_backend(name))
    _timed(fn, 50, workers)  # let allocator pools and thread stacks reach their steady size
    start = rss_mb()
    _, good = _timed(fn, runs, workers)
    return {"grader_rss_mb_start": round(start, 1), "grader_rss_mb_end": round(rss_mb(), 1),
            "rss_runs": runs, "rss_backend": name, "rss_runs_correct": good}


def _docker_cold_start() -> float:
    from scalerl.sandbox.docker import DockerBackend

    backend = DockerBackend(max_containers=1)
    try:
        start = time.perf_counter()
        backend.run(["python", "-c", "pass"])
        return round(time.perf_counter() - start, 2)
    finally:
        backend.close()


def run(args: argparse.Namespace) -> int:
    from scalerl.sandbox import available_backends

    avail = available_backends()
    names = args.backend or [n for n in ("bwrap", "bwrap-cold", "docker") if avail[n][0]]
    bad = [n for n in names if n not in avail or not avail[n][0]]
    if bad:
        print(f"scalerl bench sandbox: backend(s) {bad} unavailable: "
              f"{ {n: avail.get(n, (False, 'unknown'))[1] for n in bad} }")
        return 2
    result = measure(names, args.n, args.workers, args.rounds)
    if "docker" in names:
        result["docker_cold_start_s"] = _docker_cold_start()
    if args.rss_runs and names:
        result.update(measure_rss(args.rss_backend or names[0], args.rss_runs, args.workers))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"baseline (bare python3 -I subprocess): {result['baseline_runs_per_s']:.1f} runs/s "
          f"({args.workers} at once)")
    for name, row in result["backends"].items():
        print(f"{name:10s} {row['runs_per_s']:7.1f} runs/s  ratio {row['ratio']:.2f}x  "
              f"({row['correct']}/{result['n']} correct)")
        if "tool_calls_per_s" in row:
            print(f"{'':10s} {row['tool_calls_per_s']:7.1f} tool calls/s on warm sessions, "
                  f"{row['tool_vs_runs']:.1f}x its single runs ({row['tool_correct']}/"
                  f"{result['n']} correct); a session's cold start "
                  f"{row['session_cold_start_s']:.2f} s")
    if "grader_rss_mb_start" in result:
        print(f"grader RSS over {result['rss_runs']} {result['rss_backend']} runs: "
              f"{result['grader_rss_mb_start']} MB -> {result['grader_rss_mb_end']} MB")
    return 0
