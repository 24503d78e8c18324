"""New policy weights as a directory of safetensors shards, written with one host copy.

`write_weights(named_tensors, directory, dtype, chunk_mb)` converts each tensor to the engine's
dtype on its own device, moves it to the host (the one host copy: a GPU tensor's `.cpu()`, or the
dtype conversion of a CPU tensor; a CPU tensor already in that dtype is written from its own
memory), and streams it into shard files of at most `chunk_mb` (a tensor larger than that gets a
shard of its own). Tensors of one decoder layer stay in one shard. The directory is written under
a temporary name and renamed, so a reader never sees half of it; vLLM reads it with
`reload_weights(weights_path=...)` (in-process workers and HTTP servers alike).
`staging_dir` picks where: `engine.weights_dir`, else /dev/shm when it has room. The format is
safetensors' own (an 8-byte header length, a JSON header, the raw bytes). Nothing here talks to
an engine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                      torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
                      torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


@dataclass(frozen=True)
class WrittenWeights:
    """What `write_weights` wrote."""

    path: Path
    tensors: int
    bytes: int
    shards: int
    seconds: float


def layer_key(name: str) -> str:
    """Tensors that must travel together: those of one decoder layer (`...layers.N.`), else the
    tensor alone. vLLM fuses a layer's projections (q/k/v, gate/up) into one parameter, so a
    reload must never see part of a layer."""
    m = _LAYER.match(name)
    return m.group(1) if m else name


def host_tensor(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`tensor` in `dtype`, contiguous, on the host: converted on its own device first (a bf16
    copy of a GPU fp32 tensor crosses the bus at half the size)."""
    t = tensor.detach()
    if t.dtype != dtype and t.is_floating_point():
        t = t.to(dtype)
    return t.to("cpu").contiguous()


def _header(entries: list[tuple[str, torch.Tensor]]) -> bytes:
    meta: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in entries:
        size = t.numel() * t.element_size()
        meta[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                      "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(meta, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_shard(path: Path, entries: list[tuple[str, torch.Tensor]]) -> int:
    """One safetensors file from host tensors, each written from its own memory; its size."""
    with path.open("wb") as fh:
        fh.write(_header(entries))
        for _, t in entries:
            if t.numel():
                fh.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
        return fh.tell()


def _groups(named: Iterable[tuple[str, torch.Tensor]]
            ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive tensors of one layer (`layer_key`) as one group."""
    group: list[tuple[str, torch.Tensor]] = []
    for name, tensor in named:
        if group and layer_key(group[-1][0]) != layer_key(name):
            yield group
            group = []
        group.append((name, tensor))
    if group:
        yield group


SHM = Path("/dev/shm")
"""Memory-backed storage most Linux hosts mount: the engine reloads from RAM, not a disk."""


def staging_dir(weights_dir: str | None, weights_bytes: int, shm: Path = SHM) -> Path:
    """Where new weights are written for the engine to reload: `engine.weights_dir` when set;
    else `shm` when it has room for two versions (the one loaded and the next) of
    `weights_bytes`; else the system's temp dir."""
    if weights_dir:
        return Path(weights_dir)
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= (
            2 * weights_bytes):
        return shm
    return Path(tempfile.gettempdir())


def write_weights(named: Iterable[tuple[str, torch.Tensor]], directory: str | Path, *,
                  dtype: str = "float32", chunk_mb: int = 512) -> WrittenWeights:
    """Write `named` tensors as safetensors shards of at most `chunk_mb` (whole layers) into
    `directory`, atomically (a temporary sibling, then a rename). Raises ValueError on an
    unsupported dtype; the half-written temporary directory is removed on any failure."""
    if dtype not in DTYPES:
        raise ValueError(f"weights dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if chunk_mb <= 0:
        raise ValueError(f"chunk_mb must be > 0, got {chunk_mb}")
    start = time.perf_counter()
    final = Path(directory)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        counts = _write_shards(named, tmp, DTYPES[dtype], chunk_mb << 20)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WrittenWeights(final, counts[0], counts[1], counts[2], time.perf_counter() - start)


def _write_shards(named, tmp: Path, dtype: torch.dtype, limit: int) -> tuple[int, int, int]:
    shard: list[tuple[str, torch.Tensor]] = []
    size = tensors = written = shards = 0
    for group in _groups(named):
        host = [(n, host_tensor(t, dtype)) for n, t in group]
        nbytes = sum(t.numel() * t.element_size() for _, t in host)
        if shard and size + nbytes > limit:
            written += write_shard(tmp / f"model-{shards:05d}.safetensors", shard)
            shards, shard, size = shards + 1, [], 0
        shard += host
        size += nbytes
        tensors += len(host)
    if shard:
        written += write_shard(tmp / f"model-{shards:05d}.safetensors", shard)
        shards += 1
    if not tensors:
        raise ValueError("no tensors to write")
    return tensors, written, shards
