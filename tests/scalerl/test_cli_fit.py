"""`scalerl fit`: run directories, JSONL and CSV in; JSON summary, plot, one-line errors out."""

import json
import re

import numpy as np
import pytest

from scalerl import cli
from scalerl.evaluation.scaling import sigmoid

JSON_KEYS = {"input", "x", "y", "A", "B", "C_mid", "R0", "r0_fitted", "r0_source", "sse", "rmse",
             "n_points", "x_range", "grid", "fit_s", "warnings", "ci", "bootstrap_s"}


def write_run(run_dir, c_mid=2542.0, b=1.92, a=0.61, seed=0, val_has_compute=True):
    """A trainer-like metrics.jsonl: a val row every 20 steps (before that step's train row,
    with or without the compute column), a train row every 10 steps."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for step in range(0, 1201, 10):
        gpu_h = step * 13.3
        if step % 20 == 0:
            y = float(sigmoid(gpu_h, a, b, c_mid, 0.3)) + (rng.normal(0, 0.01) if step else 0.0)
            row = {"step": step, "val/pass@1": y}
            if val_has_compute:
                row["compute/gpu_hours"] = gpu_h
            rows.append(row)
        rows.append({"step": step, "loss/total": 0.1, "compute/gpu_hours": gpu_h})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def fit_json(capsys, *argv):
    assert cli.main(["fit", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_fit_run_dir_json_and_plot(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    png = tmp_path / "fit.png"
    out = fit_json(capsys, str(run), "--x", "compute/gpu_hours", "--y", "val/pass@1",
                   "--min-x", "1500", "--bootstrap", "10", "--plot", str(png))
    assert set(out) >= JSON_KEYS
    assert out["n_points"] == 55  # val rows at steps 120, 140, ..., 1200 (1596-15960 GPU-h)
    assert abs(out["A"] - 0.61) <= 0.02
    assert out["R0"] == 0.3 and out["r0_source"] == "first point (x=0)"
    assert set(out["ci"]) >= {"A", "B", "C_mid"} and out["ci"]["n"] == 10
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_fit_until_reports_extrapolation(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    out = fit_json(capsys, str(run), "--x", "compute/gpu_hours", "--y", "val/pass@1",
                   "--min-x", "1500", "--fit-until", "8000", "--bootstrap", "0")
    ext = out["extrapolation"]
    assert ext["until"] == 8000 and ext["n_heldout"] == 30
    assert ext["rmse"] <= 0.03
    assert out["x_range"][1] <= 8000
    assert "ci" not in out


def test_several_inputs_give_a_list_of_fits_and_one_plot(tmp_path, capsys):
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", c_mid=1675.0, b=1.09, a=0.615, seed=1)
    png = tmp_path / "both.png"
    out = fit_json(capsys, str(a), str(b), "--x", "compute/gpu_hours", "--y", "val/pass@1",
                   "--bootstrap", "0", "--plot", str(png))
    assert [f["input"] for f in out["fits"]] == [str(a), str(b)]
    assert png.exists()


def test_val_rows_without_compute_are_joined_by_step(tmp_path, capsys):
    run = write_run(tmp_path / "run", val_has_compute=False)
    out = fit_json(capsys, str(run), "--x", "compute/gpu_hours", "--y", "val/pass@1",
                   "--min-x", "1500", "--bootstrap", "0")
    assert out["n_points"] == 55
    assert out["r0_source"] == "first point (x=0)" and out["R0"] == 0.3  # step 0 -> x = 0


def test_csv_input_and_human_output(tmp_path, capsys):
    x = np.linspace(0, 16000, 41)
    y = sigmoid(x, 0.61, 1.92, 2542.0, 0.3)
    path = tmp_path / "points.csv"
    path.write_text("gpu_h,pass\n" + "".join(f"{a},{b}\n" for a, b in zip(x, y, strict=True)))
    assert cli.main(["fit", str(path), "--x", "gpu_h", "--y", "pass", "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    a = float(re.search(r"A     = ([0-9.]+)", text).group(1))
    assert abs(a - 0.61) <= 0.005 + 1e-9  # noise-free: off by at most one A grid step
    assert "R0    = 0.3000  (first point (x=0))" in text


def test_malformed_jsonl_is_one_line_error_naming_the_line(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_text('{"c": 1, "r": 0.3}\n{"c": 2, "r": 0.4}\n{"c": 3, "r": \n')
    assert cli.main(["fit", str(path), "--x", "c", "--y", "r"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path} line 3: not JSON" in err[0]


@pytest.mark.parametrize("argv, message", [
    (["--x", "nope", "--y", "val/pass@1"], "no row has numeric 'nope'"),
    (["--x", "compute/gpu_hours", "--y", "val/pass@1", "--a-grid", "0.5:0.4:0.01"],
     "--a-grid '0.5:0.4:0.01'"),
    (["--x", "compute/gpu_hours", "--y", "val/pass@1", "--min-x", "1e9"],
     "no point with x > 0 in the fitted range"),
])
def test_bad_input_is_one_line_error(tmp_path, capsys, argv, message):
    run = write_run(tmp_path / "run")
    assert cli.main(["fit", str(run), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_missing_run_dir_metrics_is_named(tmp_path, capsys):
    assert cli.main(["fit", str(tmp_path), "--x", "a", "--y", "b"]) == 2
    assert "needs metrics.jsonl" in capsys.readouterr().err
