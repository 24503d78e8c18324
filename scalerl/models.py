"""Model names to local directories: `tiny` (the cached tiny model, built on first use) or a
Hugging Face model directory.

Every command that loads a model resolves its name here, so `tiny` and a bad name behave the same
everywhere. Nothing is downloaded or loaded here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def resolve_model(name: str, log: Callable[[str], None] | None = None) -> str:
    """The local directory of model `name`; ValueError (one line) when there is none."""
    if name == "tiny":
        from scalerl.tiny import ensure_tiny

        return str(ensure_tiny(log=log or (lambda msg: print(msg, file=sys.stderr))))
    path = Path(name)
    if not (path / "config.json").is_file():
        raise ValueError(f"model {name!r}: no config.json there; give a Hugging Face model "
                         "directory or 'tiny'")
    return str(path)
