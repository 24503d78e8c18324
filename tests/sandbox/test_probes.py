"""The hostile-program suite (sandbox/probes/) on every available backend, judged from the host.

Each probe is checked for its status, the time the verdict took, survivors (host /proc scanned
for the run's token), leaks (run cgroups, processes left in warm containers) and its own host-side
check (planted secrets, the loopback listener, interpreter hashes). The `process` backend runs
only the probes it claims to contain; `test_checks_catch_real_escapes` shows the checks fail
when something does escape.
"""

from __future__ import annotations

import os
import signal

import pytest

from scalerl.sandbox.selfcheck import PROBES, run_probe, survivors

BACKEND_PARAMS = [pytest.param("bwrap", marks=pytest.mark.bwrap),
                  pytest.param("bwrap-cold", marks=pytest.mark.bwrap),
                  pytest.param("docker", marks=pytest.mark.docker), "process"]


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
@pytest.mark.parametrize("name", BACKEND_PARAMS)
def test_probe_is_contained(name, probe, require_backend):
    backend = require_backend(name)
    contains = getattr(backend, "contains", None)
    if contains is not None and probe.name not in contains:
        pytest.skip(f"{name} is not a security boundary and does not claim to contain "
                    f"{probe.name} (see sandbox/process.py)")
    verdict = run_probe(backend, probe)
    assert verdict.escaped == "", verdict


@pytest.mark.parametrize("probe_name", ["env_secrets", "host_files", "loopback_network",
                                        "daemon"])
def test_checks_catch_real_escapes(probe_name, require_backend):
    """On the unconfined `process` backend these probes DO escape, and the checks must say so."""
    backend = require_backend("process")
    probe = next(p for p in PROBES if p.name == probe_name)
    verdict = run_probe(backend, probe)
    try:
        assert verdict.escaped, f"{probe_name} escaped the process backend but was not flagged"
    finally:  # the daemon probe really leaves a daemon behind: clean it up
        for pid in survivors(verdict.token, grace_s=0):
            os.kill(pid, signal.SIGKILL)
