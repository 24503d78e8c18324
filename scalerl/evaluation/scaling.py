"""ScaleRL's sigmoidal compute-performance curve (Khatri et al. 2025, Eq. 1) and its fit.

R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B). `fit_sigmoid` follows the paper's procedure (§A.5):
a grid over A and C_mid, B fitted by least squares at every grid point, the lowest SSE kept; R0
fixed (the first point's value) or fitted. B is solved at all grid points at once (vectorised
damped Gauss-Newton) and the best grid points are re-solved with `scipy.optimize.curve_fit`.
Also bootstrap intervals and the extrapolation check. No file reading or plotting here.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

PAPER_A_GRID = (0.45, 0.80, 0.005)
"""A in {0.450, 0.455, ..., 0.800} (§A.5)."""
PAPER_CMID_GRID = (100.0, 40000.0, 100)
"""C_mid in 100 linearly spaced GPU-hours values (§A.5); the default here derives it from x."""
MIN_POINTS = 4
B_MIN, B_MAX = 1e-6, 50.0
"""B is kept in (0, 50]: with R0 free, (A, R0, B) and (R0, A, -B) give the same curve, and a
B beyond 50 is a step (the data do not constrain the curve's shape; the paper's B are 1-2.5)."""


def sigmoid(c: Any, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); R(0) = R0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        logc = np.where(c > 0, np.log(np.where(c > 0, c, 1.0)), -np.inf)
    return R0 + (A - R0) * expit(B * (logc - np.log(C_mid)))


@dataclass(frozen=True)
class Grid:
    """The (A, C_mid) grid searched, and how it was chosen."""

    a: tuple[float, float, float]
    """A low, high, step."""
    cmid: tuple[float, float, int]
    """C_mid low, high, number of values."""
    cmid_spacing: str = "log"
    """`log` (geometric) or `linear` (the paper's)."""
    origin: str = "given"

    def a_values(self) -> np.ndarray:
        lo, hi, step = self.a
        return np.round(lo + step * np.arange(int(np.floor((hi - lo) / step + 1e-9)) + 1), 10)

    def cmid_values(self) -> np.ndarray:
        lo, hi, num = self.cmid
        return (np.geomspace if self.cmid_spacing == "log" else np.linspace)(lo, hi, int(num))


def default_grid(x: np.ndarray, y: np.ndarray) -> Grid:
    """The paper's A grid (widened when the data need it) and a C_mid grid from the x range.

    A: 0.45-0.80 step 0.005 while the fitted y stay <= 0.65; above that the top goes to 1.0 (a
    pass rate's ceiling; for y beyond 1, y_max + the y range) and the bottom down to y_max - 0.1
    when needed. C_mid: 100 geometric values from x_min/10 to 10 x_max of the fitted points,
    since a laptop run's compute is seconds, not the paper's 100-40,000 GPU-hours.
    """
    lo, hi, step = PAPER_A_GRID
    y_min, y_max = float(y.min()), float(y.max())
    lo = min(lo, np.floor((y_max - 0.1) / step) * step)
    if y_max > 0.65:
        hi = 1.0 if y_max <= 1.0 else np.ceil((2 * y_max - y_min) / step) * step
    widened = (lo, hi) != PAPER_A_GRID[:2]
    origin = "paper A grid" + (" widened to cover the data" if widened else "")
    return Grid(a=(round(float(lo), 6), round(float(hi), 6), step),
                cmid=(float(x.min()) / 10, float(x.max()) * 10, 100), cmid_spacing="log",
                origin=origin + "; C_mid from the x range")


@dataclass(frozen=True)
class SigmoidFit:
    A: float
    B: float
    C_mid: float
    R0: float
    sse: float
    rmse: float
    n_points: int
    x_range: tuple[float, float]
    """Smallest and largest x of the fitted points."""
    r0_fitted: bool
    grid: Grid
    fit_s: float
    """Wall-clock seconds of this fit."""
    warnings: tuple[str, ...] = ()

    def predict(self, x: Any) -> np.ndarray:
        return sigmoid(x, self.A, self.B, self.C_mid, self.R0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["x_range"] = list(self.x_range)
        d["warnings"] = list(self.warnings)
        return d


def _s(B: np.ndarray, u: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(B u)) = 1 / (1 + (C_mid / x)^B), rows of u per grid point; (G, N)."""
    return 1.0 / (1.0 + np.exp(np.minimum(B[:, None] * u, 700.0)))


def solve_b(u: np.ndarray, y: np.ndarray, A: np.ndarray, R0: np.ndarray, B0: np.ndarray,
            fit_r0: bool = False, max_iter: int = 60, tol: float = 1e-9):
    """Least-squares B > 0 (and R0 if `fit_r0`) at G grid points at once: damped Gauss-Newton.

    u: (G, N) log(C_mid / x); y: (N,); A, R0, B0: (G,). Returns B, R0, SSE, each (G,).
    A grid point stops when its step or its SSE change is below `tol` (relative).
    """
    B, R0, A = np.clip(B0.astype(float), B_MIN, B_MAX), R0.astype(float).copy(), A.astype(float)
    s = _s(B, u)
    sse = ((R0[:, None] + (A - R0)[:, None] * s - y) ** 2).sum(1)
    lam = np.full(len(B), 1e-3)
    active = np.arange(len(B))
    for _ in range(max_iter):
        if not len(active):
            break
        ua, sa, a, r0, b = u[active], s[active], A[active], R0[active], B[active]
        r = r0[:, None] + (a - r0)[:, None] * sa - y
        jb = -(a - r0)[:, None] * ua * sa * (1 - sa)  # d f / d B, (G, N)
        hbb, gb = (jb * jb).sum(1), (jb * r).sum(1)
        damp = 1 + lam[active]
        if fit_r0:
            jr = 1 - sa  # d f / d R0
            hrr, hbr, gr = (jr * jr).sum(1), (jb * jr).sum(1), (jr * r).sum(1)
            det = hbb * damp * hrr * damp - hbr**2
            det = np.where(np.abs(det) > 1e-300, det, np.inf)
            db = -(hrr * damp * gb - hbr * gr) / det
            nr = r0 - (hbb * damp * gr - hbr * gb) / det
        else:
            db = -gb / np.where(hbb > 0, hbb * damp, np.inf)
            nr = r0
        nb = np.clip(b + db, B_MIN, B_MAX)
        ns = _s(nb, ua)
        new_sse = ((nr[:, None] + (a - nr)[:, None] * ns - y) ** 2).sum(1)
        ok = new_sse <= sse[active]
        acc = active[ok]
        gain = sse[acc] - new_sse[ok]
        B[acc], R0[acc], s[acc] = nb[ok], (nr[ok] if fit_r0 else R0[acc]), ns[ok]
        sse[acc] = new_sse[ok]
        lam[active] = np.where(ok, lam[active] / 10, lam[active] * 10)
        done = np.zeros(len(active), bool)
        done[ok] = (np.abs(db[ok]) <= tol * (1 + np.abs(b[ok]))) | (gain <= tol * sse[acc])
        done |= lam[active] > 1e10
        active = active[~done]
    return B, R0, sse


def _curve_fit_b(x, y, A, C_mid, R0, p0, fit_r0):
    """scipy's curve_fit for B (and R0) at one grid point; None if it does not converge."""
    if fit_r0:
        def model(c, B, r0):
            return sigmoid(c, A, B, C_mid, r0)
        p0 = list(p0)
    else:
        def model(c, B):
            return sigmoid(c, A, B, C_mid, R0)
        p0 = [p0[0]]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, _ = curve_fit(model, x, y, p0=p0)
    except RuntimeError:  # maxfev reached: no B at this grid point
        return None
    b, r0 = (popt[0], popt[1]) if fit_r0 else (popt[0], R0)
    if not B_MIN <= b <= B_MAX:  # the mirrored curve or a step (see B_MIN), not a solution
        return None
    return b, r0, float(((sigmoid(x, A, b, C_mid, r0) - y) ** 2).sum())


def _grid_arrays(x, grid):
    a_vals, c_vals = grid.a_values(), grid.cmid_values()
    A = np.repeat(a_vals, len(c_vals))
    C = np.tile(c_vals, len(a_vals))
    u = np.log(c_vals)[:, None] - np.log(x)[None, :]  # (Gc, N)
    return A, C, np.tile(u, (len(a_vals), 1))


def grid_search(x, y, r0, grid, *, fit_r0=False, solver="vectorised", top_k=4, B0=None,
                max_iter=60):
    """Best (A, B, C_mid, R0, SSE) over the grid, plus the per-point B (for warm starts)."""
    A, C, u = _grid_arrays(x, grid)
    R0 = np.full(len(A), float(r0))
    if solver == "curve_fit":  # the paper's literal loop; the baseline for `bench`
        sols = [_curve_fit_b(x, y, a, c, r0, (1.0, r0), fit_r0) for a, c in zip(A, C, strict=True)]
        B = np.array([s[0] if s else np.nan for s in sols])
        R0 = np.array([s[1] if s else np.nan for s in sols])
        sse = np.array([s[2] if s else np.inf for s in sols])
    else:
        B0 = np.ones(len(A)) if B0 is None else B0
        B, R0, sse = solve_b(u, y, A, R0, B0, fit_r0=fit_r0, max_iter=max_iter)
    sse = np.where(np.isfinite(sse), sse, np.inf)
    best = [(sse[i], A[i], B[i], C[i], R0[i]) for i in np.argsort(sse)[:max(1, top_k)]]
    if solver != "curve_fit":
        for i in np.argsort(sse)[:top_k]:  # re-solve the leaders with curve_fit (default p0=1)
            for p0 in ((1.0, r0), (B[i], R0[i])):
                sol = _curve_fit_b(x, y, A[i], C[i], r0, p0, fit_r0)
                if sol:
                    best.append((sol[2], A[i], sol[0], C[i], sol[1]))
    sse_b, a, b, c, r = min(best, key=lambda t: t[0])
    return (float(a), float(b), float(c), float(r), float(sse_b)), B


def _edge_warnings(A, B, C_mid, R0, grid):
    out = []
    if A < R0:
        out.append(f"A={A:.3f} is below R0={R0:.3f}: the pass rate fell, there is no rise to "
                   "extrapolate")
    if B >= B_MAX * (1 - 1e-9):
        out.append(f"B hit its cap {B_MAX:g}: a step, not a sigmoid; the points do not show a "
                   "rise the curve can describe")
    a_vals, c_vals = grid.a_values(), grid.cmid_values()
    if np.isclose(A, a_vals[0]) or np.isclose(A, a_vals[-1]):
        out.append(f"A={A:.3f} is at the edge of the A grid "
                   f"[{a_vals[0]:.3f}, {a_vals[-1]:.3f}]; widen --a-grid")
    if np.isclose(C_mid, c_vals[0]) or np.isclose(C_mid, c_vals[-1]):
        out.append(f"C_mid={C_mid:.4g} is at the edge of the C_mid grid "
                   f"[{c_vals[0]:.4g}, {c_vals[-1]:.4g}]; widen --cmid-grid")
    return out


def select(x, y, min_x=None, max_x=None) -> np.ndarray:
    """Mask of the points fitted: x > 0, x >= min_x, x <= max_x."""
    mask = x > 0
    if min_x is not None:
        mask &= x >= min_x
    if max_x is not None:
        mask &= x <= max_x
    return mask


def fit_sigmoid(x: Any, y: Any, *, r0: float | None = None, fit_r0: bool = False,
                min_x: float | None = None, max_x: float | None = None,
                grid: Grid | None = None, solver: str = "vectorised", top_k: int = 4,
                B0: np.ndarray | None = None, max_iter: int = 60) -> SigmoidFit:
    """Fit R(C) to the points with min_x <= x <= max_x (and x > 0), as in the paper's §A.5.

    R0 is fixed to `r0`, else to y at the smallest x given (the step-0 value); with `fit_r0` it
    is fitted too, starting there.
    """
    t0 = time.perf_counter()
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y must be finite")
    mask = select(x, y, min_x, max_x)
    need = MIN_POINTS + int(fit_r0)
    if mask.sum() < need:
        raise ValueError(f"the fit needs at least {need} points with x > 0 in the fitted range, "
                         f"got {int(mask.sum())} (of {len(x)}); lower --min-x or add points")
    r0 = float(y[np.argmin(x)]) if r0 is None else float(r0)
    xf, yf = x[mask], y[mask]
    grid = grid or default_grid(xf, yf)
    (A, B, C_mid, R0, sse), _ = grid_search(xf, yf, r0, grid, fit_r0=fit_r0, solver=solver,
                                            top_k=top_k, B0=B0, max_iter=max_iter)
    return SigmoidFit(A=A, B=B, C_mid=C_mid, R0=R0, sse=sse, rmse=float(np.sqrt(sse / len(xf))),
                      n_points=len(xf), x_range=(float(xf.min()), float(xf.max())),
                      r0_fitted=fit_r0, grid=grid, fit_s=time.perf_counter() - t0,
                      warnings=tuple(_edge_warnings(A, B, C_mid, R0, grid)))


def bootstrap(x: Any, y: Any, fit: SigmoidFit, *, n: int = 100, seed: int = 0,
              min_x: float | None = None, max_x: float | None = None,
              level: float = 0.95) -> dict[str, Any]:
    """Percentile intervals of A, B, C_mid (and R0 if fitted): resample the fitted points with
    replacement and refit on the same grid with R0 as in `fit` (each refit starts from the full
    fit's B at every grid point and runs at most 20 Gauss-Newton steps)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    mask = select(x, y, min_x, max_x)
    xf, yf = x[mask], y[mask]
    rng = np.random.default_rng(seed)
    A, C, u = _grid_arrays(xf, fit.grid)
    B0 = solve_b(u, yf, A, np.full(len(A), fit.R0), np.ones(len(A)), fit_r0=fit.r0_fitted)[0]
    params, skipped = [], 0
    for _ in range(n):
        idx = rng.integers(0, len(xf), len(xf))
        if len(np.unique(xf[idx])) < MIN_POINTS + int(fit.r0_fitted):
            skipped += 1
            continue
        f = fit_sigmoid(xf[idx], yf[idx], r0=fit.R0, fit_r0=fit.r0_fitted, grid=fit.grid,
                        top_k=1, B0=B0, max_iter=20)
        params.append((f.A, f.B, f.C_mid, f.R0))
    if not params:
        raise ValueError("bootstrap: no resample had enough distinct points")
    arr = np.array(params)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    names = ["A", "B", "C_mid"] + (["R0"] if fit.r0_fitted else [])
    out: dict[str, Any] = {k: [float(v) for v in np.percentile(arr[:, i], q)]
                           for i, k in enumerate(names)}
    out.update(level=level, n=len(params), skipped=skipped)
    return out


def extrapolation(fit: SigmoidFit, x: Any, y: Any) -> dict[str, Any]:
    """Errors of `fit` on held-out points (those beyond the fitted range)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    held = x > fit.x_range[1]
    if not held.any():
        return {"n_heldout": 0}
    xh, yh = x[held], y[held]
    err = fit.predict(xh) - yh
    last = int(np.argmax(xh))
    return {"n_heldout": int(held.sum()), "rmse": float(np.sqrt(np.mean(err**2))),
            "max_abs_error": float(np.abs(err).max()), "mean_error": float(err.mean()),
            "last": {"x": float(xh[last]), "y": float(yh[last]),
                     "predicted": float(fit.predict(xh[last]))}}
