"""`scalerl bench sandbox`'s tool-call figures: calls/s on warm sessions beside single runs."""

from __future__ import annotations

import json
import os

import pytest

from scalerl.cli import main
from scalerl.sandbox import available_backends


@pytest.mark.bwrap
def test_bench_sandbox_reports_tool_calls_beside_single_runs(capsys):
    ok, why = available_backends()["bwrap"]
    if not ok:  # as tests/sandbox/conftest.py: CI must have bwrap
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(f"no bwrap: {why}")
    assert main(["bench", "sandbox", "--json", "--n", "8", "--rounds", "2", "--rss-runs", "0",
                 "--workers", "2", "--backend", "bwrap", "--backend", "bwrap-cold"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["backends"]["bwrap"]
    assert row["tool_correct"] == 8 and row["tool_calls_per_s"] > 0
    assert row["tool_vs_runs"] == pytest.approx(row["tool_calls_per_s"] / row["runs_per_s"],
                                                rel=0.02)
    assert row["session_cold_start_s"] > 0
    assert "tool_calls_per_s" not in out["backends"]["bwrap-cold"]  # same sessions as bwrap
