"""Shared sandbox fixtures: which backends run here, and a parametrised `backend` fixture.

In CI (`CI=true`) a bwrap or docker backend that cannot run FAILS the test; elsewhere it skips
with the reason. The `process` backend is not a security boundary and only runs the probes it
claims to contain (see `scalerl.sandbox.selfcheck`).
"""

from __future__ import annotations

import os
import warnings

import pytest

from scalerl.sandbox import available_backends, get_backend
from scalerl.sandbox.process import NotASandboxWarning

IN_CI = os.environ.get("CI") == "true"
SECURE_BACKENDS = ("bwrap", "bwrap-cold", "docker")
ALL_BACKENDS = ("bwrap", "bwrap-cold", "docker", "process")


def require(name: str):
    """The shared backend `name`, or skip (fail in CI for bwrap/docker) with the reason."""
    ok, why = available_backends()[name]
    if not ok:
        msg = f"sandbox backend {name!r} unavailable: {why}"
        if IN_CI and name in SECURE_BACKENDS:
            pytest.fail(f"{msg} (CI=true: it must be installed and working)")
        pytest.skip(msg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotASandboxWarning)
        return get_backend(name)


def _marks(name: str):
    return [getattr(pytest.mark, name.split("-")[0])] if name in SECURE_BACKENDS else []


@pytest.fixture
def require_backend():
    """`require_backend(name)`: the backend, or skip (FAIL in CI for bwrap/docker)."""
    return require


@pytest.fixture(params=[pytest.param(n, marks=_marks(n)) for n in ALL_BACKENDS])
def backend(request):
    return require(request.param)


@pytest.fixture(params=[pytest.param(n, marks=_marks(n)) for n in SECURE_BACKENDS])
def secure_backend(request):
    return require(request.param)
