"""Weight publishing from the trainer to the Generator: one interface, two transports.

`inprocess` (used on one machine): stage every tensor (detached, contiguous CPU copies, names,
shapes and dtypes checked) before the engine is touched, then `generator.update_weights`; on a
failure or timeout the previous weights are re-applied, so the generator keeps the previous
version. `nccl` (GPUs): vLLM 0.32's weight-transfer engine; it cannot run on CPU (see its class).
Every publish has a timeout that raises naming what was being sent. No training happens here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

Weights = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


class PublishError(RuntimeError):
    """A publish failed; the message says what was sent and what state the generator is in."""


class PublishTimeout(PublishError, TimeoutError):
    """A publish step ran past its timeout."""


@dataclass(frozen=True)
class PublishStats:
    version: int
    num_tensors: int
    num_bytes: int
    stage_s: float
    send_s: float
    transport: str


class Publisher(Protocol):
    def publish(self, weights: Weights, version: int) -> PublishStats: ...

    def close(self) -> None: ...


def stage(weights: Weights, expected: Mapping[str, tuple[tuple[int, ...], torch.dtype]] | None
          = None) -> dict[str, torch.Tensor]:
    """Detached contiguous CPU copies of `weights`, checked against `expected` (name -> (shape,
    dtype)) when given. Raises PublishError naming the first missing, extra or mismatched tensor."""
    items = weights.items() if isinstance(weights, Mapping) else weights
    staged = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in items}
    if expected is not None:
        missing = sorted(set(expected) - set(staged))
        extra = sorted(set(staged) - set(expected))
        if missing or extra:
            raise PublishError(f"weights do not match the generator's: missing {missing[:5]}, "
                               f"unexpected {extra[:5]} ({len(missing)}/{len(extra)} in all)")
        for name, t in staged.items():
            shape, dtype = expected[name]
            if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                raise PublishError(f"tensor {name!r}: got {tuple(t.shape)} {t.dtype}, "
                                   f"the generator has {tuple(shape)} {dtype}")
    return staged


def describe(staged: Mapping[str, torch.Tensor], version: int) -> str:
    """What a publish sends, for error messages."""
    nbytes = sum(t.numel() * t.element_size() for t in staged.values())
    first = next(iter(staged), "none")
    return (f"weights version {version} ({len(staged)} tensors, {nbytes / 2**20:.1f} MiB, "
            f"first {first!r})")


class _Call:
    """`fn` running in a daemon thread, so a hung call can be timed out (not cancelled)."""

    def __init__(self, fn: Callable[[], Any]):
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._target, args=(fn,), name="publish",
                                       daemon=True)
        self.thread.start()

    def _target(self, fn: Callable[[], Any]) -> None:
        try:
            self.result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            self.result["error"] = e

    def wait(self, timeout_s: float, what: str) -> Any:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise PublishTimeout(f"timed out after {timeout_s:.3g}s while sending {what}")
        if "error" in self.result:
            raise self.result["error"]
        return self.result.get("value")


def call_with_timeout(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run `fn`; raise PublishTimeout naming `what` if it runs past `timeout_s`."""
    return _Call(fn).wait(timeout_s, what)


def _shapes(weights: Mapping[str, torch.Tensor]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {n: (tuple(t.shape), t.dtype) for n, t in weights.items()}


class InProcessPublisher:
    """Publish into a Generator living in this process (`generator.update_weights`).

    `initial_weights`/`initial_version`: what the generator holds now (the trainer's starting
    state dict, or a callable returning it, called only if the first publish fails, e.g.
    `checkpoint_weights(generator.model_path)`); the rollback target until a publish succeeds.
    Without it no rollback is possible for the first publish, and a failure says so.
    """

    transport = "inprocess"

    def __init__(self, generator: Any, *, timeout_s: float = 120.0,
                 initial_weights: Weights | Callable[[], Weights] | None = None,
                 initial_version: int = 0,
                 rollback_timeout_s: float | None = None):
        if timeout_s <= 0 or (rollback_timeout_s is not None and rollback_timeout_s <= 0):
            raise ValueError(f"timeout_s and rollback_timeout_s must be > 0, got {timeout_s} "
                             f"and {rollback_timeout_s}")
        self.rollback_timeout_s = rollback_timeout_s or timeout_s
        if not callable(getattr(generator, "update_weights", None)):
            raise TypeError(f"{type(generator).__name__} has no update_weights(); "
                            "the inprocess transport needs a rollout.engine.Generator")
        self.generator, self.timeout_s = generator, timeout_s
        self._previous: tuple[dict[str, torch.Tensor], int] | None = None
        self._initial: tuple[Callable[[], Weights], int] | None = None
        if callable(initial_weights):
            self._initial = (initial_weights, initial_version)
        elif initial_weights is not None:
            self._previous = (stage(initial_weights), initial_version)
        self._broken: str | None = None

    def publish(self, weights: Weights, version: int) -> PublishStats:
        """Stage all of `weights`, then swap them into the generator as `version`."""
        if self._broken:
            raise PublishError(f"publisher is unusable: {self._broken}")
        t0 = time.monotonic()
        expected = _shapes(self._previous[0]) if self._previous else None
        staged = stage(weights, expected)
        last = self._previous or self._initial
        if last is not None and version <= last[1]:
            raise ValueError(f"publish version {version} must exceed the last published "
                             f"version {last[1]}")
        what = describe(staged, version)
        t1 = time.monotonic()
        call = self._send(staged, version, self.timeout_s)
        try:
            call.wait(self.timeout_s, what)
        except Exception as e:
            raise self._rollback(e, call, what) from e
        self._previous, self._initial = (staged, version), None
        nbytes = sum(t.numel() * t.element_size() for t in staged.values())
        return PublishStats(version, len(staged), nbytes, t1 - t0, time.monotonic() - t1,
                            self.transport)

    def _send(self, staged: Mapping[str, torch.Tensor], version: int, timeout_s: float) -> _Call:
        # the engine times each of its steps (pause, reload, resume); this call bounds the whole
        return _Call(lambda: self.generator.update_weights(
            list(staged.items()), version, timeout_s=timeout_s))

    def _rollback(self, error: Exception, call: _Call, what: str) -> PublishError:
        """Wait for the failed call to end, then put the previous weights back (a restore that
        overlapped a still-running update could interleave with it). Says whether it worked."""
        kind = PublishTimeout if isinstance(error, TimeoutError) else PublishError
        call.thread.join(self.rollback_timeout_s)
        if call.thread.is_alive():
            self._broken = (f"sending {what} still hung {self.rollback_timeout_s:.3g}s after "
                            "its timeout; the generator's state is unknown: restart the engine")
            return kind(self._broken)
        if self._previous is None and self._initial is None:
            self._broken = f"failed sending {what} with no previous weights to restore"
            return kind(f"{self._broken}: {error}")
        try:
            if self._previous is None:
                load, v = self._initial  # type: ignore[misc]
                self._previous = (stage(load()), v)
            weights, version = self._previous
            self._send(weights, version, self.rollback_timeout_s).wait(
                self.rollback_timeout_s, f"rollback to {describe(weights, version)}")
        except Exception as e2:  # the generator's state is unknown: refuse to go on
            version = (self._previous or self._initial)[1]  # type: ignore[index]
            self._broken = (f"failed sending {what} ({error}), and restoring version {version} "
                            f"failed too ({e2}); restart the engine")
            return kind(self._broken)
        return kind(f"failed sending {what}: {error}; the generator was restored to version "
                    f"{version}")

    def close(self) -> None:
        self._previous = None


def checkpoint_weights(model_path: str) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors checkpoint at `model_path` (a rollback target)."""
    from pathlib import Path

    from safetensors.torch import load_file

    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors under {model_path}")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


class _MappingSource:
    """A vLLM `WeightSource` over staged tensors (re-iterable; metadata matches iteration)."""

    def __init__(self, staged: Mapping[str, torch.Tensor]):
        self.staged = staged

    def metadata(self) -> list[Any]:
        from vllm.distributed.weight_transfer.base import ParamMeta

        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.staged.items()]

    def __iter__(self):
        return iter(self.staged.items())


class NCCLPublisher:
    """Broadcast weights to vLLM workers over NCCL with vLLM 0.32's weight-transfer engine.

    NOT TESTED HERE: it needs CUDA GPUs and vLLM on them (this project's CPU machines have no
    GPU; the lent GPU machine has no vLLM); only its argument checking is tested. Protocol:
    `NCCLTrainerWeightTransferEngine.trainer_init(NCCLTrainerInitInfo(...), client=...)`, then
    per publish `pause()`, `send_weights()` (start_weight_update / update_weights concurrent with
    the broadcast / finish_weight_update), `resume()`. The engine must be created with
    `weight_transfer_config=WeightTransferConfig(backend="nccl")`. `client` is any
    `VLLMWeightSyncClient` (vLLM's `HTTPVLLMWeightSyncClient` for a `vllm serve` with
    `VLLM_SERVER_DEV_MODE=1`). vLLM reloads layer by layer, so a broadcast that fails midway can
    leave the engine half-updated: on any failure the generator is left PAUSED (never sampling
    from mixed weights) and this publisher refuses further publishes; restart the engine.
    """

    transport = "nccl"

    def __init__(self, client: Any, *, master_address: str, master_port: int, world_size: int,
                 rank: int = 0, timeout_s: float = 300.0, packed: bool = True,
                 pause: Callable[[], None] | None = None,
                 resume: Callable[[], None] | None = None,
                 set_version: Callable[[int], None] | None = None):
        for method in ("init_weight_transfer_engine", "start_weight_update", "update_weights",
                       "finish_weight_update"):
            if not callable(getattr(client, method, None)):
                raise TypeError(f"client {type(client).__name__} lacks {method}(): it must "
                                "implement vLLM's VLLMWeightSyncClient protocol")
        if not master_address:
            raise ValueError("master_address must be a host name or IP, got an empty string")
        if not 0 < master_port < 65536:
            raise ValueError(f"master_port must be in 1..65535, got {master_port}")
        if world_size < 2:
            raise ValueError(f"world_size (trainer sender + vLLM workers) must be >= 2, "
                             f"got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.client, self.timeout_s, self.packed = client, timeout_s, packed
        self.master_address, self.master_port = master_address, master_port
        self.world_size, self.rank = world_size, rank
        self.pause, self.resume, self.set_version = pause, resume, set_version
        self._engine: Any = None
        self._broken: str | None = None

    def connect(self) -> None:
        """Rendezvous with the vLLM workers (blocks until they join, up to timeout_s)."""
        if not torch.cuda.is_available():
            raise PublishError("the nccl transport needs CUDA GPUs; on CPU use 'inprocess'")
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerInitInfo,
            NCCLTrainerWeightTransferEngine,
        )

        info = NCCLTrainerInitInfo(master_address=self.master_address,
                                   master_port=self.master_port, world_size=self.world_size,
                                   packed=self.packed, rank=self.rank)
        self._engine = call_with_timeout(
            lambda: NCCLTrainerWeightTransferEngine.trainer_init(
                info, client=self.client, source=_MappingSource({})),
            self.timeout_s, f"the NCCL rendezvous at {self.master_address}:{self.master_port}")

    def publish(self, weights: Weights, version: int) -> PublishStats:
        if self._broken:
            raise PublishError(f"publisher is unusable: {self._broken}")
        if self._engine is None:
            self.connect()
        t0 = time.monotonic()
        staged = {n: t.detach().contiguous() for n, t in
                  (weights.items() if isinstance(weights, Mapping) else weights)}
        what = describe(staged, version) + f" over NCCL to {self.master_address}"
        t1 = time.monotonic()
        self._engine.source = _MappingSource(staged)
        try:
            if self.pause:
                self.pause()
            call_with_timeout(self._engine.send_weights, self.timeout_s, what)
            if self.set_version:
                self.set_version(version)  # tokens sampled from now on carry `version`
        except Exception as e:
            self._broken = (f"failed sending {what} ({e}); the generator is left paused, its "
                            "weights possibly half-updated: restart the engine")
            raise (PublishTimeout if isinstance(e, TimeoutError) else PublishError)(
                self._broken) from e
        if self.resume:
            self.resume()
        nbytes = sum(t.numel() * t.element_size() for t in staged.values())
        return PublishStats(version, len(staged), nbytes, t1 - t0, time.monotonic() - t1,
                            self.transport)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


TRANSPORTS: dict[str, type] = {"inprocess": InProcessPublisher, "nccl": NCCLPublisher}


def make_publisher(transport: str, **kwargs: Any) -> Publisher:
    """Build the publisher for `transport`; unknown names list the known ones."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown weight transport {transport!r}; known: "
                         f"{', '.join(sorted(TRANSPORTS))}")
    return TRANSPORTS[transport](**kwargs)
