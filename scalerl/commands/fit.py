"""`scalerl fit`: fit ScaleRL's sigmoid R(C) to (compute, pass rate) points of one or more runs.

Reads JSONL/CSV files or run directories (their `metrics.jsonl`), keeps rows that have both
columns, fits with `scalerl.evaluation.scaling` (the paper's grid procedure), prints the
parameters with bootstrap intervals and the extrapolation error, and draws every input on one
PNG. The maths is in `scalerl/evaluation/scaling.py`; this module reads, prints and plots.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scalerl.evaluation import scaling

HELP = "fit the sigmoid compute-performance curve R(C) (ScaleRL Eq. 1) to runs' metrics"


class InputError(ValueError):
    """Bad input: the message is one line naming the input and what would be valid."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="FILE|RUN_DIR",
                        help="JSONL or CSV files, or run directories (their metrics.jsonl)")
    parser.add_argument("--x", required=True, metavar="COLUMN",
                        help="compute column, e.g. compute/gpu_hours or compute/device_s")
    parser.add_argument("--y", required=True, metavar="COLUMN",
                        help="held-out pass-rate column, e.g. val/pass@1")
    parser.add_argument("--min-x", type=float, help="drop points below this x (paper: 1.5k GPU-h)")
    parser.add_argument("--fit-until", type=float, metavar="X",
                        help="fit on x <= X only and report the extrapolation error beyond it")
    parser.add_argument("--r0", type=float, help="fix R0 to this (default: the first point's y)")
    parser.add_argument("--fit-r0", action="store_true", help="fit R0 too (paper: fixed)")
    parser.add_argument("--a-grid", metavar="LO:HI:STEP",
                        help="A grid (default: the paper's 0.45:0.80:0.005, widened to the data)")
    parser.add_argument("--cmid-grid", metavar="LO:HI:N",
                        help="C_mid grid (default: 100 values from x_min/10 to 10 x_max)")
    parser.add_argument("--cmid-spacing", choices=["log", "linear"],
                        help="C_mid grid spacing (default: linear with --cmid-grid, as in the "
                             "paper; log for the derived range)")
    parser.add_argument("--bootstrap", type=int, default=100, metavar="N",
                        help="bootstrap resamples for the intervals (0: none; default 100)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument("--solver", choices=["vectorised", "curve_fit"], default="vectorised",
                        help="B at each grid point: vectorised Gauss-Newton + curve_fit polish, "
                             "or the paper's literal curve_fit loop (slower, same answer)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--plot", metavar="PNG", help="draw points and fitted curves here")


# ---------------------------------------------------------------------------------- reading

def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and value.strip():
        try:
            f = float(value)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL or CSV file, or of a run directory's metrics.jsonl."""
    if path.is_dir():
        if not (path / "metrics.jsonl").is_file():
            raise InputError(f"{path}: a run directory needs metrics.jsonl (none found)")
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise InputError(f"{path}: no such file or run directory")
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    rows = []
    with path.open() as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path} line {i}: not JSON ({exc.msg}); expected one JSON "
                                 f"object per line (or a .csv file)") from None
            if not isinstance(row, dict):
                raise InputError(f"{path} line {i}: expected a JSON object, "
                                 f"got {type(row).__name__}")
            rows.append(row)
    return rows


def _join_by_step(rows: list[dict[str, Any]], xcol: str, ycol: str) -> list[tuple]:
    """Validation rows carrying `step` but no compute: x from the last row at or before that
    step that has x (0 for a step-0 evaluation that precedes every such row)."""
    xs = sorted((r["step"], _number(r.get(xcol))) for r in rows
                if isinstance(r.get("step"), int) and _number(r.get(xcol)) is not None)
    steps = [s for s, _ in xs]
    pairs: list[tuple] = []
    if not xs:
        return pairs
    for r in rows:
        step, y = r.get("step"), _number(r.get(ycol))
        if not isinstance(step, int) or y is None:
            continue
        i = bisect.bisect_right(steps, step)
        if i:
            pairs.append((xs[i - 1][1], y))
        elif step == 0:
            pairs.append((0.0, y))
    return pairs


def points(rows: list[dict[str, Any]], xcol: str, ycol: str, where: str):
    """(x, y) sorted by x: rows having both columns, else y rows joined to x by `step`."""
    pairs = [(_number(r.get(xcol)), _number(r.get(ycol))) for r in rows]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs:  # the trainer logs validation rows apart from the compute columns
        pairs = _join_by_step(rows, xcol, ycol)
    if not pairs:
        seen = sorted({k for r in rows for k in r})
        raise InputError(f"{where}: no row has numeric {xcol!r} and {ycol!r}; "
                         f"columns seen: {', '.join(seen) or 'none'}")
    arr = np.array(sorted(pairs), dtype=float)
    return arr[:, 0], arr[:, 1]


def _triple(text: str | None, name: str, cast) -> tuple | None:
    if text is None:
        return None
    parts = text.split(":")
    try:
        lo, hi, third = float(parts[0]), float(parts[1]), cast(parts[2])
    except (ValueError, IndexError):
        raise InputError(f"{name} {text!r}: expected LO:HI:{'STEP' if cast is float else 'N'}"
                         ) from None
    if len(parts) != 3 or not lo < hi or third <= 0:
        raise InputError(f"{name} {text!r}: expected LO:HI:X with LO < HI and X > 0")
    return lo, hi, third


def make_grid(args, x: np.ndarray, y: np.ndarray) -> scaling.Grid:
    """The grid of the fitted points, with --a-grid/--cmid-grid/--cmid-spacing applied."""
    mask = scaling.select(x, y, args.min_x, args.fit_until)
    if not mask.any():
        raise InputError(f"no point with x > 0 in the fitted range (--min-x {args.min_x}, "
                         f"--fit-until {args.fit_until})")
    grid = scaling.default_grid(x[mask], y[mask])
    a = _triple(args.a_grid, "--a-grid", float)
    cmid = _triple(args.cmid_grid, "--cmid-grid", int)
    spacing = args.cmid_spacing or ("linear" if cmid else "log")
    origin = grid.origin if not (a or cmid) else "given"
    return scaling.Grid(a=a or grid.a, cmid=cmid or grid.cmid, cmid_spacing=spacing,
                        origin=origin)


# ---------------------------------------------------------------------------------- fitting

@dataclass(frozen=True)
class Curve:
    label: str
    x: np.ndarray
    y: np.ndarray
    fit: scaling.SigmoidFit
    summary: dict[str, Any]


def fit_one(path: str, args) -> Curve:
    x, y = points(read_rows(Path(path)), args.x, args.y, path)
    grid = make_grid(args, x, y)
    try:
        fit = scaling.fit_sigmoid(x, y, r0=args.r0, fit_r0=args.fit_r0, min_x=args.min_x,
                                  max_x=args.fit_until, grid=grid, solver=args.solver)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
    summary: dict[str, Any] = {"input": path, "x": args.x, "y": args.y, **fit.to_dict()}
    summary["r0_source"] = ("fitted" if args.fit_r0 else "--r0" if args.r0 is not None
                            else f"first point (x={x[0]:g})")
    if args.bootstrap > 0:
        t0 = time.perf_counter()
        summary["ci"] = scaling.bootstrap(x, y, fit, n=args.bootstrap, seed=args.seed,
                                          min_x=args.min_x, max_x=args.fit_until)
        summary["bootstrap_s"] = time.perf_counter() - t0
    if args.fit_until is not None:
        summary["extrapolation"] = {"until": args.fit_until, **scaling.extrapolation(fit, x, y)}
    label = Path(path).name if Path(path).is_dir() else Path(path).stem
    return Curve(label=label, x=x, y=y, fit=fit, summary=summary)


def _ci(summary: dict, key: str, fmt: str) -> str:
    ci = summary.get("ci", {}).get(key)
    return f"  [{format(ci[0], fmt)}, {format(ci[1], fmt)}]" if ci else ""


def print_summary(s: dict[str, Any]) -> None:
    lo, hi = s["x_range"]
    print(f"{s['input']}: {s['y']} against {s['x']}, {s['n_points']} points fitted "
          f"(x in [{lo:.4g}, {hi:.4g}])")
    print(f"  A     = {s['A']:.4f}{_ci(s, 'A', '.4f')}")
    print(f"  B     = {s['B']:.3f}{_ci(s, 'B', '.3f')}")
    print(f"  C_mid = {s['C_mid']:.4g}{_ci(s, 'C_mid', '.4g')}")
    print(f"  R0    = {s['R0']:.4f}{_ci(s, 'R0', '.4f')}  ({s['r0_source']})")
    g = s["grid"]
    print(f"  SSE {s['sse']:.4g}, RMSE {s['rmse']:.4g}; fit {s['fit_s']:.2f} s over "
          f"A {g['a'][0]:g}:{g['a'][1]:g}:{g['a'][2]:g} x C_mid {g['cmid'][0]:.4g}:"
          f"{g['cmid'][1]:.4g}:{g['cmid'][2]} ({g['cmid_spacing']})")
    if "ci" in s:
        print(f"  intervals: {s['ci']['level']:.0%} percentile bootstrap, {s['ci']['n']} "
              f"resamples in {s['bootstrap_s']:.1f} s")
    ext = s.get("extrapolation")
    if ext and ext["n_heldout"]:
        last = ext["last"]
        print(f"  extrapolation beyond x = {ext['until']:g}: {ext['n_heldout']} held-out points, "
              f"RMSE {ext['rmse']:.4f}, max |error| {ext['max_abs_error']:.4f}, "
              f"mean error {ext['mean_error']:+.4f}; last x={last['x']:.4g} "
              f"y={last['y']:.4f} predicted {last['predicted']:.4f}")
    elif ext:
        print(f"  extrapolation: no point beyond x = {ext['until']:g}")
    for w in s["warnings"]:
        print(f"  warning: {w}")


# ---------------------------------------------------------------------------------- plotting

def plot(curves: list[Curve], args, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for i, c in enumerate(curves):
        color, f = f"C{i}", c.fit
        lo, hi = f.x_range
        pos = c.x > 0
        fitted = pos & (c.x >= lo) & (c.x <= hi)
        held = pos & (c.x > hi)
        early = pos & (c.x < lo)
        ax.axvspan(lo, hi, color=color, alpha=0.06)
        ax.scatter(c.x[fitted], c.y[fitted], s=16, color=color, zorder=3)
        ax.scatter(c.x[early], c.y[early], s=14, color="0.6", zorder=2)
        ax.scatter(c.x[held], c.y[held], s=30, facecolors="none", edgecolors=color, zorder=3)
        xs = np.geomspace(c.x[pos].min(), max(c.x.max(), hi) * 1.5, 300)
        label = f"{c.label}: A={f.A:.3f} B={f.B:.2f} C_mid={f.C_mid:.4g} R0={f.R0:.3f}"
        ax.plot(xs[xs <= hi], f.predict(xs[xs <= hi]), color=color, lw=2, label=label)
        ax.plot(xs[xs >= hi], f.predict(xs[xs >= hi]), color=color, lw=1.5, ls="--")
        ax.axhline(f.A, color=color, lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel(args.x)
    ax.set_ylabel(args.y)
    ax.set_title("R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)\n"
                 "filled: fitted; hollow: held out; grey: before --min-x; "
                 "dashed: extrapolation; dotted: A", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.bootstrap < 0:
        print(f"scalerl fit: --bootstrap must be >= 0, got {args.bootstrap}", file=sys.stderr)
        return 2
    try:
        curves = [fit_one(p, args) for p in args.inputs]
    except InputError as exc:
        print(f"scalerl fit: {exc}", file=sys.stderr)
        return 2
    summaries = [c.summary for c in curves]
    if args.plot:
        plot(curves, args, args.plot)
        for s in summaries:
            s["plot"] = args.plot
    if args.json:
        out = summaries[0] if len(summaries) == 1 else {"fits": summaries}
        print(json.dumps(out, default=float))
    else:
        for s in summaries:
            print_summary(s)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0
