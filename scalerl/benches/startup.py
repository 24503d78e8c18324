"""`scalerl bench startup`: how long the light commands take to start, beside a bare interpreter.

Each command runs as a fresh process (as a user types it), interleaved with the baseline
`python -c pass` started the same way, `--repeats` times; the figure is the median wall time,
with the ratio to the baseline and the target (`scalerl --help` 0.5 s; `scalerl sandbox run` of a
one-line program on bwrap 1 s). One more run per command under `python -X importtime` says
whether it imported torch or vLLM (it must not). It measures; it changes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalerl.benches import positive_int

HELP = "start-up time of the light commands (--help, tasks, score, sandbox run, fit) vs python"
HEAVY = ("torch", "vllm", "transformers")
"""Top-level packages a light command must not import."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="runs of each command (median)")


def commands(work: Path) -> dict[str, tuple[list[str], float | None]]:
    """name -> (scalerl arguments, target seconds or None); `sandbox run` only where bwrap works."""
    from scalerl.sandbox import available_backends

    prog, rows = work / "prog.py", work / "math.jsonl"
    prog.write_text("print(1)\n")
    rows.write_text('{"id": "r1", "kind": "math", "completion": "\\\\boxed{4}", "answer": "4"}\n')
    table = {"--help": (["--help"], 0.5), "tasks list": (["tasks", "list"], None),
             "score (math row)": (["score", str(rows), "--out", str(work / "scores.jsonl")], None),
             "fit --help": (["fit", "--help"], None)}
    if available_backends()["bwrap"][0]:
        table["sandbox run (bwrap)"] = (["sandbox", "run", str(prog), "--backend", "bwrap"], 1.0)
    return table


def wall(argv: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, timeout=300)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-300:]}")
    return took


def heavy_imports(args: list[str]) -> list[str]:
    """Which of HEAVY `python -X importtime -m scalerl ARGS` imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "scalerl", *args],
                          capture_output=True, text=True, timeout=300)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return sorted(h for h in HEAVY if h in names)


def measure(repeats: int) -> dict:
    scalerl = [sys.executable, "-m", "scalerl"]
    base = [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="scalerl-bench-startup-") as tmp:
        table = commands(Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in table}
        baseline: list[float] = []
        for _ in range(repeats):
            baseline.append(wall(base))
            for name, (args, _) in table.items():
                times[name].append(wall([*scalerl, *args]))
        bare = statistics.median(baseline)
        rows = []
        for name, (args, target) in table.items():
            med = statistics.median(times[name])
            meets = None if target is None else med <= target
            rows.append({"command": f"scalerl {name}", "median_s": med,
                         "vs_bare_python": med / bare, "target_s": target, "meets_target": meets,
                         "heavy_imports": heavy_imports(args)})
    return {"bench": "startup", "bare_python_s": bare, "repeats": repeats, "results": rows}


def run(args: argparse.Namespace) -> int:
    out = measure(args.repeats)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"bare `python -c pass`: {out['bare_python_s']:.3f} s (median of {args.repeats})")
    for r in out["results"]:
        target = "" if r["target_s"] is None else (
            f"  target {r['target_s']:g} s: {'ok' if r['meets_target'] else 'OVER'}")
        heavy = ", ".join(r["heavy_imports"]) or "none"
        print(f"{r['command']:30s} {r['median_s']:.3f} s  (x{r['vs_bare_python']:.1f} bare)"
              f"  imports torch/vLLM/transformers: {heavy}{target}")
    return 0
