"""`SandboxConfig` and the shared backends: defaults, one-line errors, backends shared by their
settings (there is no process-wide sandbox configuration: the run's settings are passed down)."""

from __future__ import annotations

import pytest

import scalerl.sandbox as sandbox
from scalerl.sandbox import SandboxConfig, get_backend
from scalerl.sandbox.base import BACKENDS
from scalerl.sandbox.config import KNOWN_BACKENDS


def test_defaults():
    cfg = SandboxConfig()
    assert (cfg.backend, cfg.workers) == (None, None)
    assert (cfg.memory_mb, cfg.max_run_s) == (512, 60.0)
    assert not hasattr(sandbox, "configure") and not hasattr(sandbox, "current_config")


def test_known_backend_names_are_the_registered_ones():
    assert sorted(KNOWN_BACKENDS) == sorted(BACKENDS)


@pytest.mark.parametrize("kwargs, field", [
    ({"backend": "nope"}, "sandbox.backend must be one of"),
    ({"workers": 0}, "sandbox.workers must be an integer >= 1 or null"),
    ({"workers": 2.5}, "sandbox.workers must be an integer >= 1 or null"),
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


def test_get_backend_none_is_the_best_available_and_a_name_wins(require_backend):
    require_backend("bwrap")
    require_backend("bwrap-cold")
    assert get_backend().name == "bwrap"
    assert get_backend("bwrap-cold").name == "bwrap-cold"


def test_backends_are_shared_per_worker_count(require_backend):
    require_backend("bwrap")
    one = get_backend("bwrap", 1)
    assert one.max_workers == 1
    assert one.run(["python", "-c", "print(1)"]).stdout == b"1\n"
    assert get_backend("bwrap", 1) is one, "the same settings keep the warm pool"
    three = get_backend("bwrap", 3)
    assert three is not one and three.max_workers == 3
    assert three.run(["python", "-c", "print(3)"]).stdout == b"3\n"
    assert get_backend("bwrap", 1) is one, "another run's settings leave this pool alone"


def test_a_code_verdict_runs_in_the_backend_its_grading_settings_name(require_backend):
    from scalerl.envs.base import Sample
    from scalerl.envs.catalog import get_kind
    from scalerl.envs.grading import Grading

    require_backend("bwrap-cold")
    sample = Sample(id="x", task="t", prompt="", tests={"type": "stdio", "inputs": ["2\n"],
                                                         "outputs": ["4\n"]})
    code = "```python\nprint(int(input()) * 2)\n```"
    grading = Grading(SandboxConfig(backend="bwrap-cold", workers=2))
    verdict = get_kind("code").score(sample, code, {}, grading)
    assert verdict.status == "correct", verdict.detail
    assert ("bwrap-cold", 2) in sandbox._shared
    refused = get_kind("code").score(sample, code, {"backend": "process"}, grading)
    assert refused.status == "error" and "unknown code option(s) backend" in refused.detail
