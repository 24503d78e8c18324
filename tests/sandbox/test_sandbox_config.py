"""`SandboxConfig` and `configure`: defaults, one-line errors, the backend and pool they set."""

from __future__ import annotations

import pytest

from scalerl import sandbox
from scalerl.sandbox import SandboxConfig, configure, current_config, get_backend
from scalerl.sandbox.base import BACKENDS
from scalerl.sandbox.config import KNOWN_BACKENDS


@pytest.fixture
def restore_config():
    """Put the process-wide config (and the pools it sized) back as they were after the test."""
    before = current_config()
    yield
    configure(before)


def test_current_config_defaults():
    assert current_config() == SandboxConfig()
    cfg = SandboxConfig()
    assert (cfg.backend, cfg.workers, cfg.verify_workers) == (None, None, None)
    assert (cfg.memory_mb, cfg.max_run_s) == (512, 60.0)


def test_known_backend_names_are_the_registered_ones():
    assert sorted(KNOWN_BACKENDS) == sorted(BACKENDS)


@pytest.mark.parametrize("kwargs, field", [
    ({"backend": "nope"}, "sandbox.backend must be one of"),
    ({"workers": 0}, "sandbox.workers must be an integer >= 1 or null"),
    ({"workers": 2.5}, "sandbox.workers must be an integer >= 1 or null"),
    ({"verify_workers": -1}, "sandbox.verify_workers must be an integer >= 1 or null"),
    ({"memory_mb": 8}, "sandbox.memory_mb must be an integer >= 16"),
    ({"memory_mb": True}, "sandbox.memory_mb must be an integer >= 16"),
    ({"max_run_s": 0}, "sandbox.max_run_s must be a finite number > 0"),
    ({"max_run_s": float("nan")}, "sandbox.max_run_s must be a finite number > 0"),
    ({"max_run_s": "60"}, "sandbox.max_run_s must be a finite number > 0"),
])
def test_bad_values_are_one_line_errors_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as info:
        SandboxConfig(**kwargs)
    message = str(info.value)
    assert message.startswith(field) and "\n" not in message, message
    assert repr(next(iter(kwargs.values()))) in message


def test_configure_takes_only_a_sandbox_config():
    with pytest.raises(TypeError, match="SandboxConfig"):
        configure({"backend": "process"})


def test_configured_backend_is_what_get_backend_none_returns(restore_config, require_backend):
    require_backend("bwrap")
    require_backend("bwrap-cold")
    assert get_backend().name == "bwrap"
    configure(SandboxConfig(backend="bwrap-cold"))
    assert current_config().backend == "bwrap-cold"
    assert get_backend().name == "bwrap-cold"
    assert get_backend("bwrap").name == "bwrap", "a named backend still wins"
    configure(SandboxConfig())
    assert get_backend().name == "bwrap"


def test_configured_workers_size_the_warm_pool(restore_config, require_backend):
    require_backend("bwrap")
    configure(SandboxConfig(workers=1))
    one = get_backend("bwrap")
    assert one.max_workers == 1
    assert one.run(["python", "-c", "print(1)"]).stdout == b"1\n"
    configure(SandboxConfig(workers=1))
    assert get_backend("bwrap") is one, "the same worker count keeps the warm pool"
    configure(SandboxConfig(workers=3))
    three = get_backend("bwrap")
    assert three is not one and three.max_workers == 3
    assert not one._all, "the pool built for 1 worker was closed"
    assert three.run(["python", "-c", "print(3)"]).stdout == b"3\n"


def test_configure_closes_only_pools_built_with_another_worker_count(restore_config,
                                                                     monkeypatch):
    closed = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    monkeypatch.setattr(sandbox, "_shared", {"a": (Fake("a"), None), "b": (Fake("b"), 2)})
    configure(SandboxConfig(workers=2))
    assert closed == ["a"] and set(sandbox._shared) == {"b"}
