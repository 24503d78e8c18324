"""Where a model's files are: a local directory, or a Hugging Face hub id through the hub cache.

vLLM, transformers and the weight-update checks all read the same files, so a hub id
(`Qwen/Qwen3-8B`) is turned into its snapshot directory in the Hugging Face cache once, up front:
`model_dir` honours `HF_HUB_OFFLINE` (cache only) and otherwise downloads what is missing (the
config, tokenizer and safetensors files). A name that is neither gives a one-line
`ModelNotFoundError`. No loading here.
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""owner/name, as the hub spells repository ids."""
FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
"""What a model directory needs (weights as safetensors only: no duplicate .bin/.pth copies)."""


class ModelNotFoundError(ValueError):
    """No model directory for the name given (one line: the name, where it was looked for)."""


def is_hub_id(name: str) -> bool:
    return bool(HUB_ID.match(name)) and not Path(name).exists()


def model_dir(name: str) -> Path:
    """The local directory holding model `name` (a directory, or a hub id's cached snapshot)."""
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    if not is_hub_id(name):
        raise ModelNotFoundError(f"model {name!r}: no config.json there; give a Hugging Face "
                                 "model directory or a hub id (owner/name)")
    from huggingface_hub import constants, snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=FILES))
    except Exception as exc:  # offline misses, unknown repos, network errors: one line each
        where = ("not in the Hugging Face cache " f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE "
                 "is set" if constants.HF_HUB_OFFLINE else "could not be fetched from the hub")
        reason = " ".join(str(exc).split())[:200]
        raise ModelNotFoundError(f"model {name!r}: {where} ({type(exc).__name__}: {reason})"
                                 ) from exc
