"""Checkpoints: a Hugging Face model directory plus the trainer state, written atomically.

`<run-dir>/checkpoints/step-000012/` holds config.json + model.safetensors (+ tokenizer files),
loadable by transformers and vLLM, and `trainer_state.pt` (optimizer, scheduler, RNG states, the
rollout source's state: sampler position and untrained rollouts, filter state, counters). It is
written under a temporary name and renamed, so a killed run never leaves a half checkpoint.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
PREFIX = "step-"


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], *,
                    keep: int = 2) -> Path:
    """Write step `step` atomically (tmp dir + rename) and keep the `keep` most recent."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.exists():
        return []
    done = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / STATE_FILE).exists()]
    return sorted(done, key=lambda p: int(p.name[len(PREFIX):]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_state(path: Path) -> dict[str, Any]:
    """The trainer state of checkpoint `path` (the model is loaded from `path` by HF)."""
    file = Path(path) / STATE_FILE
    if not file.exists():
        raise FileNotFoundError(f"{file}: not a complete checkpoint (no {STATE_FILE})")
    return torch.load(file, weights_only=False)
