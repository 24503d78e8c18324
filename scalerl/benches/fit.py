"""`scalerl bench fit`: the sigmoid fit's grid search, vectorised vs the paper's curve_fit loop.

Both sides fit the same noisy Table 1 curve (ScaleRL 8B: C_mid 2542, B 1.92, A 0.610, R0 0.3,
61 evaluations over 16k GPU-h, points before 1.5k dropped) on the same default grid, in the same
run, and must agree; then the cost of one bootstrap resample. It measures; it tunes nothing.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from scalerl.benches import positive_int

HELP = "sigmoid fit: vectorised grid solve vs the paper's curve_fit loop (same grid, same answer)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a 15 x 20 grid instead of the default 71 x 100 (for tests)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="vectorised fits timed (best of)")
    parser.add_argument("--bootstrap", type=int, default=20, help="bootstrap resamples timed")


def _best_of(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(quick: bool, repeats: int, n_boot: int) -> dict:
    from scalerl.evaluation import scaling

    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 16000.0, 61)
    y = scaling.sigmoid(x, 0.61, 1.92, 2542.0, 0.3) + rng.normal(0.0, 0.01, len(x))
    y[0] = 0.3
    m = x >= 1500
    grid = scaling.default_grid(x[m], y[m])
    if quick:
        grid = scaling.Grid(a=(0.56, 0.70, 0.01), cmid=(1000.0, 5000.0, 20))
    size = len(grid.a_values()) * len(grid.cmid_values())
    kw = dict(min_x=1500.0, grid=grid)
    t_fast, fast = _best_of(lambda: scaling.fit_sigmoid(x, y, **kw), repeats)
    t_loop, loop = _best_of(lambda: scaling.fit_sigmoid(x, y, solver="curve_fit", **kw), 1)
    t0 = time.perf_counter()
    ci = scaling.bootstrap(x, y, fast, n=n_boot, min_x=1500.0) if n_boot else None
    t_boot = time.perf_counter() - t0
    return {
        "grid_points": size, "points": int(m.sum()),
        "vectorised_s": t_fast, "curve_fit_loop_s": t_loop, "speedup": t_loop / t_fast,
        "same_answer": bool(fast.A == loop.A and fast.C_mid == loop.C_mid
                            and abs(fast.B - loop.B) <= 1e-6 * abs(loop.B)),
        "fit": {"A": fast.A, "B": fast.B, "C_mid": fast.C_mid},
        "bootstrap": n_boot, "bootstrap_s": t_boot,
        "bootstrap_per_resample_s": t_boot / n_boot if n_boot else None,
        "ci": ci,
    }


def run(args: argparse.Namespace) -> int:
    r = measure(args.quick, max(1, args.repeats), max(0, args.bootstrap))
    if args.json:
        print(json.dumps(r))
        return 0 if r["same_answer"] else 1
    print(f"sigmoid fit on {r['points']} points, {r['grid_points']} grid points (A x C_mid)")
    print(f"  vectorised Gauss-Newton + curve_fit polish: {r['vectorised_s']:.3f} s")
    print(f"  paper's curve_fit loop (baseline):          {r['curve_fit_loop_s']:.3f} s")
    print(f"  speed-up {r['speedup']:.1f}x; same answer: {r['same_answer']} "
          f"(A {r['fit']['A']:.3f}, B {r['fit']['B']:.3f}, C_mid {r['fit']['C_mid']:.0f})")
    if r["bootstrap"]:
        print(f"  bootstrap: {r['bootstrap']} resamples in {r['bootstrap_s']:.2f} s "
              f"({r['bootstrap_per_resample_s']:.3f} s each)")
    return 0 if r["same_answer"] else 1
