"""Model names to local directories: `tiny` and `tiny-tools` (the cached tiny models, built on
first use; `TINY_MODELS`), a Hugging Face model directory, or a hub id (`Qwen/Qwen3-8B`: its
snapshot in the Hugging Face cache, honouring HF_HUB_OFFLINE; rollout/model_files.py).

Every command that loads a model resolves its name here, so `tiny`, hub ids and a bad name behave
the same everywhere, and vLLM, transformers and the weight checks read the same files. Nothing is
loaded here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from scalerl.rollout.model_files import model_dir

TINY_MODELS: tuple[str, ...] = ("tiny", "tiny-tools")
"""The tiny models the project builds itself (scalerl/tiny/__init__.py `TINY_MODELS` has their
recipes)."""


def resolve_model(name: str, log: Callable[[str], None] | None = None) -> str:
    """The local directory of model `name`; ValueError (one line) when there is none."""
    if name in TINY_MODELS:
        from scalerl.tiny import ensure_tiny, tiny_recipe

        return str(ensure_tiny(tiny_recipe(name),
                               log=log or (lambda msg: print(msg, file=sys.stderr))))
    return str(model_dir(name))
