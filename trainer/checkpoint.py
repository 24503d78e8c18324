"""Checkpoints: a Hugging Face model directory plus the trainer state, written atomically.

`<run-dir>/checkpoints/step-000012/` holds config.json + model.safetensors (+ tokenizer files),
loadable by transformers and vLLM, and `trainer_state.pt` (optimizer, scheduler, RNG states, the
rollout source's state: sampler position and untrained rollouts, filter state, counters). With a
sharded (FSDP2) policy the model files are written from the gathered full weights and the
optimizer state is saved per rank instead, by torch.distributed.checkpoint under `optimizer/`
(one file per rank; every rank writes its own shard and reads it back on resume). A LoRA run's
checkpoint holds its adapter instead of the model files: `adapter/` in PEFT's layout
(rollout/lora.py `write_adapter`; its adapter_config.json names the base model), and the
optimizer state of the adapter alone (the optimizer holds nothing else). It is all
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
OPTIMIZER_DIR = "optimizer"
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
                    keep: int = 2, state_dict: dict[str, torch.Tensor] | None = None,
                    lora: Any = None) -> Path:
    """Write step `step` atomically (tmp dir + rename) and keep the `keep` most recent.

    `state_dict`: the full weights to write (a sharded model's, gathered) instead of `model`'s
    own; a sharded optimizer's files, staged by `save_sharded_optimizer`, move in with them.
    `lora` (a LoRA run: its rollout.lora.LoraServing): only the adapter is written, under
    `adapter/` (`state_dict` then holds its tensors under PEFT's names, gathered).
    """
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    if lora is None:
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
    else:
        _save_adapter(tmp, model, lora, state_dict)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    staged = optimizer_staging(run_dir, step)
    if staged.exists():
        staged.rename(tmp / OPTIMIZER_DIR)
    rng = state["rng"] if "rng" in state else rng_state()  # a state's own RNG (taken at a
    torch.save({**state, "rng": rng, "step": step}, tmp / STATE_FILE)  # step's start) wins
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def _save_adapter(tmp: Path, model, serving, tensors: dict[str, torch.Tensor] | None) -> None:
    """A LoRA checkpoint's `adapter/` (its config names the base model the run loaded)."""
    from scalerl.rollout.lora import write_adapter
    from scalerl.trainer.lora import ADAPTER_DIR, adapter_weights

    items = tensors.items() if tensors is not None else adapter_weights(model)
    write_adapter(items, serving, model.name_or_path, tmp / ADAPTER_DIR)


def is_lora_checkpoint(path: Path) -> bool:
    """Whether checkpoint `path` holds an adapter (a LoRA run's) rather than model files."""
    from scalerl.trainer.lora import ADAPTER_DIR

    return (Path(path) / ADAPTER_DIR / "adapter_config.json").is_file()


def optimizer_staging(run_dir: Path, step: int) -> Path:
    """Where every rank writes its optimizer shard before rank 0 assembles the checkpoint."""
    return checkpoint_dir(run_dir) / f".tmp-{OPTIMIZER_DIR}-{step:06d}"


def clear_optimizer_staging(run_dir: Path, step: int) -> None:
    """Rank 0, before the ranks write: drop what a killed run left at the staging path."""
    staged = optimizer_staging(run_dir, step)
    if staged.exists():
        shutil.rmtree(staged)


def save_sharded_optimizer(model, optimizer, run_dir: Path, step: int) -> None:
    """Every rank together: write this rank's optimizer shard (torch.distributed.checkpoint)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, _bare(optimizer))}
    dcp.save(state, checkpoint_id=str(optimizer_staging(run_dir, step)))


def load_sharded_optimizer(model, optimizer, path: Path) -> None:
    """Every rank together: read this rank's optimizer shard of checkpoint `path` back."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    folder = Path(path) / OPTIMIZER_DIR
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no sharded optimizer state (the checkpoint was "
                                "written without policy.sharding=fsdp2; resume with that setting)")
    state = {"optimizer": get_optimizer_state_dict(model, _bare(optimizer))}
    dcp.load(state, checkpoint_id=str(folder))
    set_optimizer_state_dict(model, _bare(optimizer), state["optimizer"])


def _bare(optimizer):
    """The torch optimizer inside an Accelerate wrapper."""
    return getattr(optimizer, "optimizer", optimizer)


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
