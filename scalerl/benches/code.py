"""`scalerl bench code`: code-grading throughput (problems/s) beside the naive unsandboxed way.

Grades HumanEval's canonical solutions (and synth_code's warm-start solutions) with `score_code`
(one sandbox run per problem, all its tests inside) through a thread pool. The baseline is what
the public harnesses do: `prompt + solution + test + check(entry)` run as one bare
`python3 -I -c` subprocess per problem, judged by its exit code (no sandbox, no hack defences).
Both are timed in the same run, interleaved, with the same concurrency. `cpu_ms_per_problem` is
the grading's CPU time (this process and its reaped children) per problem, which machine load
does not change: complete on `bwrap-cold` and `process`, where every run is a child reaped at its
end; a warm backend's workers are counted only once they exit (not within the run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from scalerl.benches import positive_int

HELP = "code grading problems/s (score_code in the sandbox) vs bare exit-code subprocesses"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=positive_int, default=164,
                        help="HumanEval problems (default all 164)")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                        help="problems graded at once (default: CPU count)")
    parser.add_argument("--backend", default=None, help="sandbox backend (default: bwrap)")
    parser.add_argument("--synth", type=int, default=100,
                        help="synth_code test problems also graded (default 100; 0 = skip)")


def _bare(sample) -> bool:
    t = sample.tests
    program = f"{t['prelude']}\n{_solution_code(sample)}\n{t['test']}\ncheck({t['entry_point']})\n"
    done = subprocess.run(["/usr/bin/python3", "-I", "-c", program], capture_output=True,
                          timeout=60)
    return done.returncode == 0


def _solution_code(sample) -> str:
    from scalerl.envs.code import extract_code

    return extract_code(sample.meta["solution"], requires_thinking=False) or ""


def _cpu_s() -> float:
    """CPU seconds of this process and of its children reaped so far."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def _timed(fn, items, workers: int, cpu: list[float] | None = None) -> tuple[float, int]:
    start, cpu_start = time.perf_counter(), _cpu_s()
    with ThreadPoolExecutor(workers) as ex:
        good = sum(ex.map(fn, items))
    if cpu is not None:
        cpu.append(_cpu_s() - cpu_start)
    return time.perf_counter() - start, good


def measure(n: int, workers: int, backend: str | None, synth: int) -> dict:
    from scalerl.envs.catalog import get_task
    from scalerl.envs.code import score_code
    from scalerl.sandbox import SandboxConfig

    samples = list(get_task("humaneval").samples("test"))[:n]
    sandbox = SandboxConfig(backend)

    def graded(sample) -> bool:
        return score_code(sample.meta["solution"], sample.tests, sandbox=sandbox).correct

    _timed(graded, samples[:workers], workers)  # warm-up: imports, page cache, cgroup parents
    half = len(samples) // 2
    secs = {"baseline": 0.0, "score_code": 0.0}
    good = {"baseline": 0, "score_code": 0}
    cpu: list[float] = []
    for part in (samples[:half], samples[half:]):  # interleaved: load hits both alike
        for key, fn in (("baseline", _bare), ("score_code", graded)):
            dt, ok = _timed(fn, part, workers, cpu if key == "score_code" else None)
            secs[key] += dt
            good[key] += ok
    out = {"n": len(samples), "workers": workers, "backend": backend or "default",
           "baseline_problems_per_s": round(len(samples) / secs["baseline"], 2),
           "problems_per_s": round(len(samples) / secs["score_code"], 2),
           "ratio": round(secs["baseline"] / secs["score_code"], 3),
           "correct": good["score_code"], "baseline_passed": good["baseline"],
           "humaneval_s": round(secs["score_code"], 2),
           "cpu_ms_per_problem": round(1e3 * sum(cpu) / len(samples), 2)}
    if synth:
        task = get_task("synth_code")
        items = list(task.samples("test"))[:synth]
        dt, ok = _timed(lambda s: task.score(s, s.meta["solution"]).correct, items, workers)
        out.update({"synth_n": len(items), "synth_problems_per_s": round(len(items) / dt, 2),
                    "synth_correct": ok})
    return out


def run(args: argparse.Namespace) -> int:
    result = measure(args.n, args.workers, args.backend, args.synth)
    if getattr(args, "json", False):
        print(json.dumps(result))
        return 0
    print(f"baseline (bare python3 -I, exit code): {result['baseline_problems_per_s']:.1f} "
          f"problems/s ({result['baseline_passed']}/{result['n']} passed)")
    print(f"score_code ({result['backend']}): {result['problems_per_s']:.1f} problems/s, "
          f"ratio {result['ratio']:.2f}x ({result['correct']}/{result['n']} correct, "
          f"{result['humaneval_s']:.1f} s, {result['workers']} at once)")
    if "synth_n" in result:
        print(f"synth_code: {result['synth_problems_per_s']:.1f} problems/s "
              f"({result['synth_correct']}/{result['synth_n']} correct)")
    return 0
