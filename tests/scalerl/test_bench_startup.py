"""`scalerl bench startup --json`: every light command measured beside bare python, and none of
them imports torch, vLLM or transformers (the reason they start fast). Timings are reported, not
asserted: this machine is shared; the import check is what cannot be noisy."""

from bench_cli import bench_json

from scalerl.sandbox import available_backends


def test_light_commands_start_without_torch_or_vllm():
    out = bench_json("startup", "--repeats", "1", timeout_s=600)
    rows = {r["command"]: r for r in out["results"]}
    expected = {"scalerl --help", "scalerl tasks list", "scalerl score (math row)",
                "scalerl fit --help"}
    if available_backends()["bwrap"][0]:
        expected.add("scalerl sandbox run (bwrap)")
    else:
        print("bwrap is not available here: `sandbox run` is not measured")
    assert set(rows) == expected
    for name, r in rows.items():
        assert r["heavy_imports"] == [], (name, r["heavy_imports"])
        # Both timed (> 0); their order is not asserted: `--help` imports next to nothing, and on
        # a loaded machine it once timed 0.048 s beside bare python's 0.051 s.
        assert r["median_s"] > 0 and out["bare_python_s"] > 0
        print(f"{name}: {r['median_s']:.3f} s (bare python {out['bare_python_s']:.3f} s)")
    assert rows["scalerl --help"]["target_s"] == 0.5
    if "scalerl sandbox run (bwrap)" in rows:
        assert rows["scalerl sandbox run (bwrap)"]["target_s"] == 1.0
