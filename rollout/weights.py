"""Weight-update helpers for the generators: errors, checks, version marks.

`check_tensors` validates names and shapes against the checkpoint before the engine is touched;
`expand_versions` turns update marks into per-token policy versions; `check_precision_match` is
the LM-head dtype check the glue runs once between the trainer and what its generator reports. No
engine here (rollout/weight_files.py writes the tensors the engine reloads).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch


class WeightUpdateError(RuntimeError):
    """A weight update failed or timed out; the Generator's version is unchanged."""


class WeightsUnknownError(WeightUpdateError):
    """A weight update failed and putting the previous weights back failed too: the engine's
    weights are unknown and it must be restarted."""


class PrecisionMismatchError(ValueError):
    """Generator and trainer compute the LM head in different dtypes."""


def check_precision_match(generator_head_dtype: str, trainer_head_dtype: str) -> None:
    """Raise when the generator (as it reports itself) and the trainer compute the LM head in
    different dtypes (ScaleRL §3.2: FP32 on both sides, or neither)."""
    if generator_head_dtype != trainer_head_dtype:
        raise PrecisionMismatchError(
            f"the LM head must run in one dtype on both sides: the generator computes it in "
            f"{generator_head_dtype}, the trainer in {trainer_head_dtype} (a one-sided FP32 head "
            "widens the logprob mismatch; policy.fp32_head sets both)")


def expand_versions(marks: list[tuple[int, int]], n: int) -> list[int]:
    """Per-token versions from (first token index, version) marks in increasing order."""
    versions = []
    for i, (_start, version) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else n
        versions += [version] * max(0, min(end, n) - len(versions))
    return versions


def checkpoint_shapes(model_path: str) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of the safetensors checkpoint of `model_path` (a directory, or a
    hub id through the Hugging Face cache); FileNotFoundError when it has no safetensors files."""
    from safetensors import safe_open

    from scalerl.rollout.model_files import model_dir

    folder = model_dir(model_path)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files, so the names and shapes of "
                                "new weights cannot be checked")
    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (safe_open is not a dict)
                shapes[name] = tuple(fh.get_slice(name).get_shape())
    return shapes


def weights_bytes(model_path: str, dtype: str) -> int:
    """Bytes of `model_path`'s checkpoint tensors in `dtype` (0 when it has no safetensors)."""
    import math

    size = {"float32": 4, "bfloat16": 2, "float16": 2}.get(dtype, 4)
    try:
        shapes = checkpoint_shapes(model_path)
    except FileNotFoundError:
        return 0
    return size * sum(math.prod(shape) for shape in shapes.values())


def weights_root(weights_dir: str | None, model_path: str, dtype: str, owner: object) -> Path:
    """A folder of `owner`'s own (a generator) for the new weights it stages, under
    rollout/weight_files.py `staging_dir`; the checkpoint's size, which decides whether
    /dev/shm has room, is read only when `engine.weights_dir` leaves the choice open."""
    from scalerl.rollout.weight_files import staging_dir

    size = 0 if weights_dir else weights_bytes(model_path, dtype)
    return staging_dir(weights_dir, size) / f"scalerl-weights-{os.getpid()}-{id(owner):x}"


def check_tensors(tensors: Sequence[tuple[str, torch.Tensor]],
                  known: dict[str, tuple[int, ...]], what: str, where: str) -> None:
    """Raise WeightUpdateError unless every tensor's name and shape are in the checkpoint."""
    for name, t in tensors:
        if name not in known:
            raise WeightUpdateError(f"{what}: unknown tensor {name!r} (not in the checkpoint at "
                                    f"{where})")
        if tuple(t.shape) != known[name]:
            raise WeightUpdateError(f"{what}: tensor {name!r} has shape {tuple(t.shape)}, the "
                                    f"model expects {known[name]}")


def checked_tensors(named: Iterable[tuple[str, torch.Tensor]], known: dict[str, tuple[int, ...]],
                    what: str, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The (name, tensor) pairs, each checked with `check_tensors` as it passes (one at a time,
    so a stream of tensors is never held whole)."""
    for name, tensor in named:
        check_tensors([(name, tensor)], known, what, where)
        yield name, tensor
