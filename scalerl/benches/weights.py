"""`scalerl bench weights`: handing new weights to the engine, as files, beside two baselines.

Times `rollout.weight_files.write_weights` (the engine's dtype, bounded shards, one host copy)
on a model-shaped set of tensors, beside safetensors' own `save_file` of the same tensors (the
baseline writer) and the old path (the whole state dict serialised as one bytes blob), and the
peak extra resident memory of each (sampled in the background): the blob path holds the whole
model again in memory, the shard writer at most one shard. It measures; it tunes nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import threading
import time
from pathlib import Path

from scalerl.benches import positive_int

HELP = "new weights to the engine: shard writer vs safetensors save_file vs one bytes blob"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb", type=positive_int, default=256,
                        help="size of the fp32 model-shaped tensors (MiB, default 256)")
    parser.add_argument("--chunk-mb", type=positive_int, default=64, help="shard size (MiB)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="best of N")


def model_tensors(mb: int) -> list:
    """Decoder-shaped fp32 tensors totalling about `mb` MiB (1024-wide layers)."""
    import torch

    width, per_layer = 1024, 4 * 1024 * 1024 * 4  # 4 square projections, fp32
    named = []
    for i in range(max(1, (mb << 20) // per_layer)):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            named.append((f"model.layers.{i}.self_attn.{proj}.weight", torch.randn(width, width)))
    return named


class _PeakRSS:
    def __init__(self):
        import psutil

        self.proc, self.base, self.peak = psutil.Process(), 0, 0
        self._stop = threading.Event()

    def __enter__(self):
        self.base = self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.002)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def _time(fn, repeats: int) -> tuple[float, float]:
    """(best seconds, the largest peak extra RSS in MiB over the repeats)."""
    best, extra = float("inf"), 0.0
    for _ in range(repeats):
        with _PeakRSS() as rss:
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        extra = max(extra, rss.extra_mb)
    return best, extra


def measure(mb: int, chunk_mb: int, repeats: int) -> dict:
    from safetensors.torch import save, save_file

    from scalerl.rollout.weight_files import write_weights

    named = model_tensors(mb)
    size = sum(t.numel() * t.element_size() for _, t in named) / 2**20
    fresh = itertools.count()  # every write goes to a new name, as each version does
    with tempfile.TemporaryDirectory(prefix="scalerl-bench-weights-") as tmp:
        paths = {
            "shards_fp32": lambda: write_weights(named, Path(tmp) / f"a{next(fresh)}",
                                                 chunk_mb=chunk_mb),
            "shards_bf16": lambda: write_weights(named, Path(tmp) / f"b{next(fresh)}",
                                                 dtype="bfloat16", chunk_mb=chunk_mb),
            "save_file": lambda: save_file(dict(named), str(Path(tmp) / f"c{next(fresh)}")),
            "blob": lambda: save(dict(named)),
        }
        out = {}
        for name, fn in paths.items():
            seconds, extra = _time(fn, repeats)
            out[name] = {"mb_per_s": round(size / seconds, 1), "peak_extra_mb": round(extra, 1)}
    out["size_mb"] = round(size, 1)
    out["shards_vs_save_file"] = round(out["shards_fp32"]["mb_per_s"]
                                       / out["save_file"]["mb_per_s"], 3)
    return out


def run(args: argparse.Namespace) -> int:
    result = {"bench": "weights", **measure(args.mb, args.chunk_mb, args.repeats)}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['size_mb']} MiB of fp32 decoder tensors, {args.chunk_mb} MiB shards:")
    for name in ("shards_fp32", "shards_bf16", "save_file", "blob"):
        r = result[name]
        print(f"  {name:12s} {r['mb_per_s']:>9.1f} MiB/s  peak extra RSS {r['peak_extra_mb']:>7.1f}"
              " MiB")
    print(f"shard writer vs safetensors save_file: x{result['shards_vs_save_file']:.2f}")
    return 0
