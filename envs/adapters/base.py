"""`ADAPTERS`: the registry of environment adapters, `environment:` key -> factory.

Each adapter module (envs/adapters/trl.py, openenv.py, ...) registers its factory here under
the key a task spec uses (`class`, `openenv`); envs/adapters/__init__.py `from_spec` looks it up.
Nothing else here.
"""

from __future__ import annotations

from collections.abc import Callable

from scalerl.envs.environment import Environment
from scalerl.sandbox.registry import Registry

AdapterFactory = Callable[..., Environment]
ADAPTERS: Registry[AdapterFactory] = Registry("environment adapter")
"""`environment:` key -> factory(value, **options) -> Environment."""
