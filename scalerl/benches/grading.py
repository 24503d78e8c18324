"""`scalerl bench grading`: grading throughput here beside grading on Ray with 1 and 2 nodes.

Three setups, one after the other in one run: `local` (this machine's sandbox, math pool and
tool sessions, as a run with `verifiers.cluster: local` grades), then Ray with one node of all
the cores and with two nodes splitting them (raylets on this machine: envs/ray_grading.py
`raylets`; the driver talks to them as to remote nodes). Each setup grades synth_code's reference
solutions `--workers` at once (code verdicts/s), runs `--sessions` tool sessions making `--calls`
calls each at once (tool calls/s), and grades `--sequential` verdicts one at a time (the mean
latency; Ray's minus local's is what Ray adds to a verdict). Reported as ratios to local, which
is measured before and after the Ray setups (their mean); the setups are not interleaved (a
cluster starts per setup), so load that changes mid-run still skews them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scalerl.benches import positive_int

HELP = "grading throughput (code verdicts/s, tool calls/s, latency) here vs Ray on 1 and 2 nodes"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=positive_int, default=40,
                        help="synth_code solutions graded per setup (default 40)")
    parser.add_argument("--workers", type=positive_int, default=8,
                        help="verdicts requested at once (default 8)")
    parser.add_argument("--sessions", type=positive_int, default=4,
                        help="tool sessions at once (default 4)")
    parser.add_argument("--calls", type=positive_int, default=10,
                        help="calls per tool session (default 10)")
    parser.add_argument("--sequential", type=positive_int, default=8,
                        help="verdicts graded one at a time for the latency (default 8)")


def _timed(fn, items: list, workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        good = sum(ex.map(fn, items))
    return time.perf_counter() - start, good


def _session_calls(sessions: Any, calls: int) -> int:
    session = sessions.acquire()
    try:
        session.run("x = 0")
        return sum(session.run("x += 1\nx").output == f"{i}\n" for i in range(1, calls + 1))
    finally:
        session.close()


def measure(grading: Any, args: argparse.Namespace) -> dict[str, float]:
    """One setup's code verdicts/s, tool calls/s and mean sequential verdict latency."""
    from scalerl.envs.catalog import get_task
    from scalerl.envs.context import run_context

    task = get_task("synth_code")
    samples = list(task.samples("test"))[:args.n]

    def graded(sample) -> bool:
        return task.score(sample, sample.meta["solution"], grading).correct

    _timed(graded, samples[:args.workers], args.workers)  # warm-up: workers, imports
    code_s, correct = _timed(graded, samples, args.workers)
    latency_s, _ = _timed(graded, samples[:args.sequential], 1)
    sessions = run_context("plain", None, grading).sessions
    try:
        _session_calls(sessions, 1)  # warm-up: the session pool
        tool_s, ok_calls = _timed(lambda _: _session_calls(sessions, args.calls),
                                  list(range(args.sessions)), args.sessions)
    finally:
        sessions.close()
    return {"verdicts_per_s": round(len(samples) / code_s, 2), "correct": correct,
            "tool_calls_per_s": round(args.sessions * args.calls / tool_s, 2),
            "tool_calls_ok": ok_calls,
            "latency_ms": round(1000 * latency_s / args.sequential, 1)}


def run(args: argparse.Namespace) -> int:
    from scalerl.envs.grading import Grading, VerifierConfig, close_clusters
    from scalerl.envs.ray_grading import raylets

    cores = len(os.sched_getaffinity(0))
    out: dict[str, Any] = {"cores": cores, "n": args.n, "workers": args.workers}
    before = measure(Grading(), args)
    close_clusters()
    for name, nodes in (("ray_1_node", 1), ("ray_2_nodes", 2)):
        with raylets(nodes, max(1, cores // nodes)) as address:
            grading = Grading(verifiers=VerifierConfig(cluster="ray", ray_address=address))
            out[name] = measure(grading, args)
    after = measure(Grading(), args)  # local before and after the Ray setups: their mean
    out["local"] = local = {k: round((before[k] + after[k]) / 2, 2) for k in before}
    for name in ("ray_1_node", "ray_2_nodes"):
        r = out[name]
        out[f"{name}_vs_local"] = {
            "verdicts_per_s": round(r["verdicts_per_s"] / local["verdicts_per_s"], 3),
            "tool_calls_per_s": round(r["tool_calls_per_s"] / local["tool_calls_per_s"], 3),
            "added_latency_ms": round(r["latency_ms"] - local["latency_ms"], 1)}
    if getattr(args, "json", False):
        print(json.dumps(out))
        return 0
    for name in ("local", "ray_1_node", "ray_2_nodes"):
        r = out[name]
        ratio = out.get(f"{name}_vs_local")
        extra = (f"  ({ratio['verdicts_per_s']:.2f}x verdicts/s, {ratio['tool_calls_per_s']:.2f}x "
                 f"tool calls/s, +{ratio['added_latency_ms']:.0f} ms a verdict)") if ratio else ""
        print(f"{name:12s} {r['verdicts_per_s']:7.1f} verdicts/s ({r['correct']}/{args.n} "
              f"correct), {r['tool_calls_per_s']:7.1f} tool calls/s, {r['latency_ms']:.0f} ms "
              f"a verdict{extra}")
    return 0
