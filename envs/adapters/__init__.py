"""Environments written for other harnesses, played as scalerl environments.

A task spec's `environment:` mapping names one adapter by its key and gives its options:
`{class: package.module:Class}` (a TRL-style environment class, envs/adapters/trl.py),
`{openenv: URL}` (an OpenEnv environment server, envs/adapters/openenv.py) or `{verifiers:
TASKSET}` (a verifiers taskset, played out of process: envs/adapters/verifiers.py), with the common
limits (`max_turns`, `max_observation_chars`) and the adapter's own options beside it.
`ADAPTERS` (envs/adapters/base.py) maps each key to the function that builds the environment,
registered by the adapter modules this package imports; `from_spec` checks the
mapping (one adapter key, known options) and builds it, raising ValueError in one line naming
the key and what is valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scalerl.envs.adapters import openenv as _openenv  # noqa: F401 - registers `openenv`
from scalerl.envs.adapters import trl as _trl  # noqa: F401 - registers `class`
from scalerl.envs.adapters import verifiers as _verifiers  # noqa: F401 - registers `verifiers`
from scalerl.envs.adapters.base import ADAPTERS
from scalerl.envs.environment import Environment


def from_spec(spec: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> Environment:
    """The environment a spec's `environment:` mapping describes (module docstring)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"'environment' must be a mapping with one of "
                         f"{', '.join(ADAPTERS.names())}, got {spec!r:.60}")
    keys = [k for k in spec if k in ADAPTERS]
    if len(keys) != 1:
        raise ValueError(f"'environment' needs exactly one of {', '.join(ADAPTERS.names())}; "
                         f"got keys {', '.join(map(str, spec)) or 'none'}")
    options = {k: v for k, v in spec.items() if k != keys[0]} | dict(limits or {})
    try:
        return ADAPTERS[keys[0]](spec[keys[0]], **options)
    except TypeError as exc:
        raise ValueError(f"environment {keys[0]}: {' '.join(str(exc).split())}") from None
