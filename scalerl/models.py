"""Model names to local directories: `tiny` (the cached tiny model, built on first use), a
Hugging Face model directory, or a hub id (`Qwen/Qwen3-8B`: its snapshot in the Hugging Face
cache, honouring HF_HUB_OFFLINE; rollout/model_files.py).

Every command that loads a model resolves its name here, so `tiny`, hub ids and a bad name behave
the same everywhere, and vLLM, transformers and the weight checks read the same files. Nothing is
loaded here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from scalerl.rollout.model_files import model_dir


def resolve_model(name: str, log: Callable[[str], None] | None = None) -> str:
    """The local directory of model `name`; ValueError (one line) when there is none."""
    if name == "tiny":
        from scalerl.tiny import ensure_tiny

        return str(ensure_tiny(log=log or (lambda msg: print(msg, file=sys.stderr))))
    return str(model_dir(name))
