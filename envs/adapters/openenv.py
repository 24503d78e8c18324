"""OpenEnv servers as scalerl environments: `environment: {openenv: URL}` (being written)."""

from __future__ import annotations

from typing import Any

from scalerl.envs.adapters.base import ADAPTERS


@ADAPTERS.register("openenv")
def openenv_environment(url: Any, **options: Any):
    raise NotImplementedError("the OpenEnv adapter is not written yet")
