"""Weight publishing from the trainer to the generator: one interface, two transports.

`files` (the default, `engine.weight_transfer: files`): the generator's own `update_weights` writes
the tensors as safetensors shards (one host copy, bounded chunks) and reloads them in place; a
failed reload restores the previous version there. This module adds the overall timeout and
refuses to go on once the generator's state is unknown. A failed publish is a
`GeneratorUnavailable` (the generator cannot take this policy), so a training run checkpoints
and stops on it, like a run with no server left. `nccl` (GPUs): vLLM 0.32's weight-transfer
engine broadcasts the tensors from the trainer to the engine's workers. A LoRA run
(`EngineConfig.lora` set) publishes only its adapter (`LoraPublisher`), whatever the
transport. Every publish has a timeout that raises naming what was being sent. No training
happens here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from scalerl.rollout.base_generator import GeneratorUnavailable
from scalerl.rollout.weights import WeightsUnknownError

Weights = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]

WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""engine.dtype -> the dtype weights travel in (the engine's own: no cast on its side)."""


class PublishError(GeneratorUnavailable):
    """A publish failed; the message says what was sent and what state the generator is in. The
    training loop checkpoints and stops on it (the trainer's weights are safe; `--resume` starts
    the generator on them)."""


class PublishTimeout(PublishError, TimeoutError):
    """A publish step ran past its timeout."""


@dataclass(frozen=True)
class PublishStats:
    version: int
    num_tensors: int
    num_bytes: int
    send_s: float
    transport: str


class Publisher(Protocol):
    def publish(self, weights: Weights, version: int) -> PublishStats: ...

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """One weight in the form this transport sends (a sharded policy's gather applies it to
        each full tensor as it is gathered, so only that form is ever held)."""

    def close(self) -> None: ...


class _Counted:
    """Passes (name, tensor) pairs through, counting tensors and bytes."""

    def __init__(self, weights: Weights):
        self.weights, self.tensors, self.bytes = weights, 0, 0

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        items = self.weights.items() if isinstance(self.weights, Mapping) else self.weights
        for name, t in items:
            self.tensors += 1
            self.bytes += t.numel() * t.element_size()
            yield name, t


def call_with_timeout(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run `fn` in a daemon thread; PublishTimeout naming `what` if it runs past `timeout_s` (a
    hung call cannot be cancelled, only abandoned)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=target, name="publish", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise PublishTimeout(f"timed out after {timeout_s:.3g}s while sending {what}")
    if "error" in result:
        raise result["error"]
    return result.get("value")


class FilesPublisher:
    """Publish through the generator's own `update_weights` (the in-process engine, or vLLM
    servers reading a shared directory): it writes, reloads, and on a failure restores the
    previous version itself. Each engine step has `timeout_s`; the whole call is bounded too."""

    transport = "files"
    method = "update_weights"
    """The generator's method that takes a publish."""
    sends = "weights"

    def __init__(self, generator: Any, *, timeout_s: float = 300.0):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if not callable(getattr(generator, self.method, None)):
            raise TypeError(f"{type(generator).__name__} has no {self.method}(); the "
                            f"{self.transport} transport needs a scalerl generator")
        self.generator, self.timeout_s = generator, timeout_s
        self.bound_s = 4 * timeout_s + 60
        """The whole call's bound: write + pause + reload + resume, each bounded by timeout_s."""
        self._last = generator.version
        self._broken: str | None = None
        config = getattr(generator, "config", None)
        self.dtype = WIRE_DTYPES.get(getattr(config, "dtype", None))
        """The engine's dtype (None: as given), the dtype the files are written in."""

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """A weight as the files take it: cast to the engine's dtype on its own device (a bf16
        copy of a GPU fp32 tensor crosses the bus at half the size), then copied into pinned
        host memory (a CPU tensor is copied only when the cast made no copy)."""
        t = tensor.detach()
        if self.dtype is not None and t.is_floating_point() and t.dtype != self.dtype:
            t = t.to(self.dtype)
        if t.device.type == "cpu":
            return t.contiguous() if t is not tensor.detach() else t.clone()
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t)
        return host

    def publish(self, weights: Weights, version: int) -> PublishStats:
        if self._broken:
            raise PublishError(f"publisher is unusable: {self._broken}")
        if version <= self._last:
            raise ValueError(f"publish version {version} must exceed the last published "
                             f"version {self._last}")
        counted = _Counted(weights)
        what = f"{self.sends} version {version}"
        update = getattr(self.generator, self.method)
        t0 = time.monotonic()
        try:
            call_with_timeout(lambda: update(counted, version, timeout_s=self.timeout_s),
                              self.bound_s, what)
        except PublishTimeout as e:
            self._broken = f"{e}; the generator's state is unknown: restart it"
            raise PublishTimeout(self._broken) from e
        except WeightsUnknownError as e:
            self._broken = f"failed sending {what}: {e}"
            raise PublishError(self._broken) from e
        except GeneratorUnavailable as e:  # e.g. the engine died: it says so itself
            self._broken = f"failed sending {what}: {e}"
            raise
        except Exception as e:  # the generator restored its previous version (its message says)
            raise PublishError(f"failed sending {what} (engine.weight_timeout_s: "
                               f"{self.timeout_s:g} s a step): {e}") from e
        self._last = version
        return PublishStats(version, counted.tensors, counted.bytes, time.monotonic() - t0,
                            self.transport)

    def close(self) -> None:
        return None


class LoraPublisher(FilesPublisher):
    """A LoRA run's publisher: the PEFT-named adapter tensors go to the generator's
    `update_adapter` (written once, one folder per version, loaded beside those in use:
    rollout/lora_adapters.py), in fp32 as the trainer holds them (vLLM casts them as it loads).
    `FilesPublisher`'s contract otherwise; `full_model_bytes` is what a full-weights publish of
    the same model moves, the figure beside the adapter's bytes."""

    transport, method, sends = "lora", "update_adapter", "adapter"

    def __init__(self, generator: Any, *, timeout_s: float = 300.0):
        super().__init__(generator, timeout_s=timeout_s)
        self.dtype = None  # as the trainer holds it
        self.bound_s = 2 * timeout_s + 60  # write + load (every server's at once), each bounded

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of its own (never a view the trainer goes on updating)."""
        return tensor.detach().to("cpu", copy=True).contiguous()

    @property
    def full_model_bytes(self) -> int:
        """The base model's checkpoint in the engine's dtype (read once)."""
        if not hasattr(self, "_full_bytes"):
            from scalerl.rollout.weights import weights_bytes

            self._full_bytes = weights_bytes(self.generator.model_path,
                                             self.generator.config.dtype)
        return self._full_bytes


def publish_metrics(stats: PublishStats, publisher: Any, seconds: float) -> dict[str, float]:
    """A publish's metrics: `rollout/sync_s` (`seconds`), `rollout/sync_bytes` (what moved) and,
    for a LoRA run, `rollout/sync_full_bytes` (what a full-weights publish would have moved)."""
    out = {"rollout/sync_s": seconds, "rollout/sync_bytes": float(stats.num_bytes)}
    if isinstance(publisher, LoraPublisher):
        out["rollout/sync_full_bytes"] = float(publisher.full_model_bytes)
    return out


class NCCLPublisher:
    """Broadcast weights to the engine's workers over NCCL with vLLM 0.32's weight-transfer
    engine (`engine.weight_transfer: nccl`).

    NOT RUN ON A GPU YET: written against vLLM 0.32's `NCCLTrainerWeightTransferEngine`; on CPU
    the tests run vLLM's own trainer side (`send_weights`: metadata, the packed producer, the
    order of the client calls) with only the communicator and CUDA streams stood in for.
    Protocol: `trainer_init(...)` once (the workers join at rank offset 1), then per publish
    `send_weights()` (start_weight_update, update_weights concurrent with the broadcast,
    finish_weight_update) between `hold()` (pause keeping the KV cache) and `release(version)`.

    Every tensor is first staged (`prepare`) on the sender's device in the engine's dtype, before
    the engine is touched (and is referenced here only until the send ends: a staged copy held
    into the next step is 15.3 GiB of rank 0's GPU at 8B): vLLM's
    `PyNcclCommunicator.broadcast` refuses a tensor off its device, and a failure there used to
    leave the engine waiting. A failure before any weight reached
    the workers is undone: `abort()` ends the workers' half-open reload (their layers get their
    current weights back) and `release(last version)` resumes generation, so the engine keeps
    its version and generates again. A failure after some chunks arrived leaves the engine
    paused (never sampling from mixed weights) and further publishes are refused. Either way
    the PublishError stops the training run with a checkpoint (trainer/loop.py).
    """

    transport = "nccl"

    def __init__(self, client: Any, *, master_address: str, master_port: int, world_size: int,
                 rank: int = 0, timeout_s: float = 300.0, packed: bool = True,
                 dtype: str = "bfloat16", device: torch.device | str | None = None,
                 version: int = 0, hold: Callable[[], None] | None = None,
                 release: Callable[[int], None] | None = None,
                 abort: Callable[[], None] | None = None):
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
        if dtype not in WIRE_DTYPES:
            raise ValueError(f"dtype {dtype!r}: the engine's dtype, one of "
                             f"{', '.join(WIRE_DTYPES)}")
        self.client, self.timeout_s, self.packed = client, timeout_s, packed
        self.master_address, self.master_port = master_address, master_port
        self.world_size, self.rank = world_size, rank
        self.dtype = WIRE_DTYPES[dtype]
        self.device = torch.device(device) if device is not None else sender_device()
        self.hold, self.release, self.abort = hold, release, abort
        self._last = version
        self._engine: Any = None
        self._comm: _CountingComm | None = None
        self._broken: str | None = None
        self._staged_on: dict[tuple[int, int], Any] = {}
        """The last CUDA event recorded on each stream `prepare` staged on (empty off CUDA)."""

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """A weight as it is broadcast: on the sender's device, in the engine's dtype (cast on
        the tensor's own device first: a GPU tensor never visits the host), contiguous."""
        t = tensor.detach()
        if t.is_floating_point() and t.dtype != self.dtype:
            t = t.to(self.dtype)
        t = t.to(self.device).contiguous()
        if t.is_cuda:  # the stream this was staged on, for `_wait_for_staging`
            stream = torch.cuda.current_stream(t.device)
            event = torch.cuda.Event()
            event.record(stream)
            self._staged_on[(t.device.index, stream.stream_id)] = event
        return t

    def connect(self) -> None:
        """Rendezvous with the vLLM workers (blocks until they join, up to timeout_s)."""
        if self.device.type == "cpu":
            raise PublishError("the nccl transport needs CUDA GPUs; on CPU use 'files'")
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerInitInfo,
            NCCLTrainerWeightTransferEngine,
        )

        info = NCCLTrainerInitInfo(master_address=self.master_address,
                                   master_port=self.master_port, world_size=self.world_size,
                                   packed=self.packed, rank=self.rank)
        self._engine = call_with_timeout(
            lambda: NCCLTrainerWeightTransferEngine.trainer_init(
                info, client=self.client, source=_TensorSource({})),
            self.timeout_s, f"the NCCL rendezvous at {self.master_address}:{self.master_port}")
        self._comm = _CountingComm(self._engine.model_update_group)
        self._engine.model_update_group = self._comm

    def publish(self, weights: Weights, version: int) -> PublishStats:
        if self._broken:
            raise PublishError(f"publisher is unusable: {self._broken}")
        if version <= self._last:
            raise ValueError(f"publish version {version} must exceed the last published "
                             f"version {self._last}")
        t0 = time.monotonic()
        what = f"weights version {version} over NCCL"
        try:  # before the engine is touched: a failure here leaves it generating
            items = weights.items() if isinstance(weights, Mapping) else weights
            tensors = {n: self.prepare(t) for n, t in items}
        except Exception as e:
            raise PublishError(f"staging {what} on {self.device} failed ({e}); the engine was "
                               f"not touched and keeps version {self._last}") from e
        what = f"weights version {version} ({len(tensors)} tensors) over NCCL"
        count = len(tensors)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        if self._engine is None:
            self.connect()
        self._wait_for_staging()
        self._engine.source = _TensorSource(tensors)
        del tensors  # the source holds the only reference, dropped once they are sent
        self._comm.sent = 0
        try:
            if self.hold:
                self.hold()
            call_with_timeout(self._engine.send_weights, self.timeout_s, what)
        except Exception as e:
            self._undo(e, what)
        finally:  # the staged copy (15.3 GiB of bf16 at 8B) is not held past the send
            self._engine.source = _TensorSource({})
        if self.release:
            self.release(version)
        self._last = version
        return PublishStats(version, count, nbytes, time.monotonic() - t0, self.transport)

    def _wait_for_staging(self) -> None:
        """Before vLLM's producer reads the staged tensors on streams of its own (vLLM 0.32
        `packed_nccl_broadcast_producer` packs on `_get_streams`' new streams, which wait on
        nothing): the casts and copies staged on the streams current in `prepare` must be done.
        A no-op off CUDA (nothing is asynchronous there)."""
        staged, self._staged_on = self._staged_on, {}
        for event in staged.values():
            event.synchronize()

    def _undo(self, error: Exception, what: str) -> None:
        """After a failed send: resume the engine on its previous weights when none of the new
        ones reached it; else refuse further publishes. Always raises."""
        sent = self._comm.sent
        if sent == 0 and not isinstance(error, TimeoutError):
            try:
                if self.abort:
                    call_with_timeout(self.abort, self.timeout_s, "ending the open reload")
                if self.release:
                    self.release(self._last)
            except Exception as again:  # noqa: BLE001 - reported in the message
                self._broken = (f"failed sending {what} ({error}), then resuming on version "
                                f"{self._last} failed too ({again}): restart the engine")
                raise PublishError(self._broken) from error
            raise PublishError(f"failed sending {what} ({error}); no weights had reached the "
                               f"engine: it keeps version {self._last} and generates again"
                               ) from error
        self._broken = (f"failed sending {what} after {sent} chunk(s) reached the engine "
                        f"({error}); it is left paused, its weights possibly half-updated: "
                        "restart the engine")
        raise (PublishTimeout if isinstance(error, TimeoutError) else PublishError)(
            self._broken) from error

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def sender_device() -> torch.device:
    """The NCCL sender's device: this process's current CUDA device (cpu without one)."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _CountingComm:
    """The trainer's communicator, counting the broadcasts that went through (a failure after
    the first one means the workers hold part of the new weights)."""

    def __init__(self, comm: Any):
        self.comm, self.sent = comm, 0

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        if stream is None:
            self.comm.broadcast(tensor, src=src)
        else:
            self.comm.broadcast(tensor, src=src, stream=stream)
        self.sent += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)


class _TensorSource:
    """A vLLM `WeightSource` over named tensors (re-iterable; metadata matches iteration)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def metadata(self) -> list[Any]:
        from vllm.distributed.weight_transfer.base import ParamMeta

        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors.items()]

    def __iter__(self):
        return iter(self.tensors.items())


def make_publisher(transport: str, generator: Any, *, timeout_s: float = 300.0) -> Publisher:
    """The publisher for `engine.weight_transfer` (a LoRA run's generator, `config.lora` set:
    the adapter publisher); unknown names list the known ones."""
    if getattr(getattr(generator, "config", None), "lora", None) is not None:
        return LoraPublisher(generator, timeout_s=timeout_s)
    if transport == "files":
        return FilesPublisher(generator, timeout_s=timeout_s)
    if transport == "nccl":
        address, world_size = generator.weight_sync_group()
        return NCCLPublisher(generator.weight_sync_client(timeout_s=timeout_s),
                             master_address=address, master_port=free_port(),
                             timeout_s=timeout_s, world_size=world_size,
                             dtype=generator.config.dtype, version=generator.version,
                             hold=generator.hold, release=generator.release,
                             abort=generator.abort_weight_update)
    raise ValueError(f"unknown weight transport {transport!r}; known: files, nccl")


def free_port() -> int:
    """A TCP port free on this host now (the NCCL rendezvous's TCPStore, hosted by rank 0)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
