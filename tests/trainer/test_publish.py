"""Weight publishing: the files transport's contract on top of the generator's own update
(versions increase, a restored failure is an error the run can report, an unknown engine state or
a hang stops further publishes), the NCCL transport's argument checks (it cannot run without
GPUs), and, on the real engine, a failed reload that leaves the previous weights in place.

`FakeGenerator` is a mock: a hang or an engine whose restore also fails cannot be produced on
demand on the real engine, so it simulates them; the real engine's own restore runs in the slow
test at the end.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from tiny_rollouts import checkpoint

from scalerl.rollout.weights import WeightsUnknownError, WeightUpdateError
from scalerl.trainer.publish import (
    FilesPublisher,
    NCCLPublisher,
    PublishError,
    PublishTimeout,
    make_publisher,
)


def weights(value: float) -> dict[str, torch.Tensor]:
    return {"a.weight": torch.full((2, 3), value), "b.bias": torch.full((3,), value),
            "c.weight": torch.full((4,), value)}


class FakeGenerator:
    """Consumes the tensors it is given; can fail as the real engine does, or hang."""

    def __init__(self, version: int = 0):
        self.version = version
        self.fail: type[Exception] | None = None
        self.hang_s = 0.0
        self.received: dict[str, torch.Tensor] = {}
        self.lock = threading.Lock()

    def update_weights(self, named_tensors, version, *, timeout_s):
        with self.lock:
            got = {name: t.clone() for name, t in named_tensors}
            time.sleep(self.hang_s)
            if self.fail is not None:
                raise self.fail(f"reload of {len(got)} tensors failed; version "
                                f"{self.version} was restored")
            self.received, self.version = got, version
            return {"reload_s": 0.0}


def test_publish_hands_every_tensor_over_and_counts_them():
    gen = FakeGenerator()
    stats = FilesPublisher(gen, timeout_s=5.0).publish(iter(weights(2.0).items()), 1)
    assert gen.version == 1 and set(gen.received) == {"a.weight", "b.bias", "c.weight"}
    assert torch.equal(gen.received["a.weight"], torch.full((2, 3), 2.0))
    assert (stats.version, stats.num_tensors, stats.num_bytes) == (1, 3, (6 + 3 + 4) * 4)
    assert stats.transport == "files"


def test_versions_must_increase():
    pub = FilesPublisher(FakeGenerator(version=2), timeout_s=5.0)
    with pytest.raises(ValueError, match="publish version 2 must exceed the last published "
                                         "version 2"):
        pub.publish(weights(1.0).items(), 2)


def test_a_restored_failure_is_reported_and_the_publisher_goes_on():
    gen = FakeGenerator()
    pub = FilesPublisher(gen, timeout_s=5.0)
    gen.fail = WeightUpdateError
    with pytest.raises(PublishError, match=r"failed sending weights version 1 \(engine\."
                                           r"weight_timeout_s: 5 s a step\): .*version 0 was "
                                           "restored"):
        pub.publish(weights(1.0).items(), 1)
    gen.fail = None
    assert pub.publish(weights(1.0).items(), 1).version == 1 and gen.version == 1


def test_an_unknown_engine_state_refuses_every_later_publish():
    gen = FakeGenerator()
    pub = FilesPublisher(gen, timeout_s=5.0)
    gen.fail = WeightsUnknownError
    with pytest.raises(PublishError):
        pub.publish(weights(1.0).items(), 1)
    gen.fail = None
    with pytest.raises(PublishError, match="publisher is unusable"):
        pub.publish(weights(1.0).items(), 2)
    assert gen.version == 0


def test_a_hung_update_times_out_and_stops_the_publisher():
    gen = FakeGenerator()
    pub = FilesPublisher(gen, timeout_s=5.0)
    pub.bound_s, gen.hang_s = 0.3, 3.0  # the real bound is minutes
    start = time.monotonic()
    with pytest.raises(PublishTimeout, match="weights version 1.*state is unknown"):
        pub.publish(weights(1.0).items(), 1)
    assert time.monotonic() - start < 2
    with pytest.raises(PublishError, match="publisher is unusable"):
        pub.publish(weights(1.0).items(), 2)


def test_unknown_transport_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown weight transport 'shm'; known: files, nccl"):
        make_publisher("shm", generator=None)


class FakeClient:
    def init_weight_transfer_engine(self, init_info): ...
    def start_weight_update(self): ...
    def update_weights(self, update_info): ...
    def finish_weight_update(self, weight_version=None): ...


NCCL_OK = {"master_address": "127.0.0.1", "master_port": 29600, "world_size": 2}


@pytest.mark.parametrize("override, message", [
    ({"master_port": 0}, "master_port must be in 1..65535, got 0"),
    ({"world_size": 1}, "world_size .* must be >= 2, got 1"),
    ({"rank": 2}, "rank must be in 0..1, got 2"),
    ({"timeout_s": 0}, "timeout_s must be > 0"),
    ({"master_address": ""}, "master_address must be"),
])
def test_nccl_transport_checks_its_arguments(override, message):
    with pytest.raises(ValueError, match=message):
        NCCLPublisher(FakeClient(), **(NCCL_OK | override))


def test_nccl_transport_needs_a_weight_sync_client():
    with pytest.raises(TypeError, match="lacks init_weight_transfer_engine"):
        NCCLPublisher(object(), **NCCL_OK)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_nccl_transport_refuses_to_run_without_cuda():
    pub = NCCLPublisher(FakeClient(), **NCCL_OK)
    with pytest.raises(PublishError, match="needs CUDA GPUs; on CPU use 'files'"):
        pub.publish(weights(1.0), 1)


@pytest.mark.slow
def test_a_failed_reload_leaves_the_real_engine_on_its_previous_weights(engine, tiny_model_path,
                                                                         monkeypatch):
    """The real engine: the new files are written, their reload fails inside vLLM's loader (a
    failure injected into the reload of the new directory only), the previous version's files
    are reloaded, and greedy outputs are exactly those from before."""
    from scalerl.envs.base import Sample
    from scalerl.rollout.types import Budget

    base = checkpoint(tiny_model_path)
    sample = Sample(id="p", task="arith", prompt="Q:12+34=")

    def greedy():
        (r,) = engine.generate([sample], n=1, budget=Budget(answer=16), temperature=0.0,
                               seed=0, score=False)
        return r.token_ids, r.logprobs

    v0 = engine.version
    before = greedy()
    real_reload = type(engine)._reload

    async def failing(self, directory, timeout_s, what):
        if directory.name == f"v{v0 + 1:06d}":  # the new version's files, not the restore
            await real_reload(self, directory, timeout_s, what)  # half-applied, then fails
            raise WeightUpdateError(f"{what} failed: injected after loading {directory.name}")
        await real_reload(self, directory, timeout_s, what)

    monkeypatch.setattr(type(engine), "_reload", failing)
    zeroed = {k: torch.zeros_like(v) if "embed" in k or "lm_head" in k else v
              for k, v in base.items()}
    pub = FilesPublisher(engine, timeout_s=60.0)
    with pytest.raises(PublishError, match=f"version {v0} was restored"):
        pub.publish(zeroed.items(), v0 + 1)
    monkeypatch.undo()
    assert engine.version == v0
    assert greedy() == before
    stats = pub.publish(base.items(), v0 + 1)  # and the next publish works
    assert stats.num_tensors == len(base) and engine.version == v0 + 1
    assert greedy() == before
