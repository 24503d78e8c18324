"""Weight publishing: staging checks, a failed or timed-out publish leaves the previous weights,
the NCCL transport's argument checks (it cannot run without GPUs), and, on the real engine, a
timed-out publish leaves the engine on its previous version and outputs.

`RecordingGenerator` is a mock: a real partial failure of a weight reload (half the tensors
applied, then an error or a hang) cannot be produced on demand, so it simulates one.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from scalerl.trainer.publish import (
    InProcessPublisher,
    NCCLPublisher,
    PublishError,
    PublishTimeout,
    checkpoint_weights,
    make_publisher,
    stage,
)


def weights(value: float) -> dict[str, torch.Tensor]:
    return {"a.weight": torch.full((2, 3), value), "b.bias": torch.full((3,), value),
            "c.weight": torch.full((4,), value)}


class RecordingGenerator:
    """Applies tensors one by one; can fail (raise or hang) after the first one."""

    def __init__(self, initial: dict[str, torch.Tensor], version: int = 0):
        self.weights = {k: v.clone() for k, v in initial.items()}
        self.version = version
        self.fail: str | None = None  # None | "raise" | "hang" | "always"
        self.hang_s = 0.5
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def update_weights(self, named_tensors, version, *, timeout_s):
        with self.lock:
            self.calls.append(version)
            for i, (name, t) in enumerate(named_tensors):
                self.weights[name] = t.clone()
                if i == 0 and self.fail in ("raise", "always"):
                    self.fail = None if self.fail == "raise" else "always"
                    raise RuntimeError(f"reload of {name} failed")
                if i == 0 and self.fail == "hang":
                    self.fail = None
                    time.sleep(self.hang_s)
            self.version = version
            return {"reload_s": 0.0}


def assert_weights_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)


def test_stage_copies_so_later_training_cannot_change_what_is_sent():
    src = weights(1.0)
    staged = stage(src)
    src["a.weight"].add_(5.0)
    assert staged["a.weight"].eq(1.0).all()


def test_stage_names_missing_extra_and_mismatched_tensors():
    expected = {k: (tuple(v.shape), v.dtype) for k, v in weights(0.0).items()}
    bad = weights(1.0)
    del bad["b.bias"]
    with pytest.raises(PublishError, match=r"missing \['b.bias'\]"):
        stage(bad, expected)
    bad = weights(1.0) | {"zzz": torch.zeros(1)}
    with pytest.raises(PublishError, match=r"unexpected \['zzz'\]"):
        stage(bad, expected)
    bad = weights(1.0) | {"c.weight": torch.zeros(5)}
    with pytest.raises(PublishError, match=r"'c.weight': got \(5,\)"):
        stage(bad, expected)
    bad = weights(1.0) | {"c.weight": torch.zeros(4, dtype=torch.float16)}
    with pytest.raises(PublishError, match="torch.float16"):
        stage(bad, expected)


def test_publish_swaps_weights_and_version():
    gen = RecordingGenerator(weights(0.0))
    pub = InProcessPublisher(gen, timeout_s=5.0, initial_weights=weights(0.0))
    stats = pub.publish(weights(1.0), 1)
    assert gen.version == 1 and stats.version == 1 and stats.num_tensors == 3
    assert stats.num_bytes == (6 + 3 + 4) * 4
    assert_weights_equal(gen.weights, weights(1.0))


def test_failed_publish_restores_the_previous_version():
    gen = RecordingGenerator(weights(0.0))
    pub = InProcessPublisher(gen, timeout_s=5.0, initial_weights=weights(0.0))
    pub.publish(weights(1.0), 1)
    gen.fail = "raise"
    with pytest.raises(PublishError, match=r"weights version 2 \(3 tensors.*reload of a.weight "
                                           r"failed.*restored to version 1"):
        pub.publish(weights(2.0), 2)
    assert gen.version == 1
    assert_weights_equal(gen.weights, weights(1.0))
    pub.publish(weights(3.0), 3)  # the publisher stays usable after a clean restore
    assert_weights_equal(gen.weights, weights(3.0))


def test_timed_out_publish_raises_and_restores_after_the_hung_update_ends():
    gen = RecordingGenerator(weights(0.0))
    gen.fail, gen.hang_s = "hang", 0.6
    pub = InProcessPublisher(gen, timeout_s=0.2, initial_weights=weights(0.0),
                             rollback_timeout_s=5.0)
    t0 = time.monotonic()
    with pytest.raises(PublishTimeout, match=r"timed out after 0.2s while sending weights "
                                             r"version 1 \(3 tensors"):
        pub.publish(weights(1.0), 1)
    assert time.monotonic() - t0 >= 0.6  # the restore waited for the hung update to finish
    assert gen.calls == [1, 0]
    assert gen.version == 0
    assert_weights_equal(gen.weights, weights(0.0))


def test_failed_restore_makes_the_publisher_refuse_to_continue():
    gen = RecordingGenerator(weights(0.0))
    pub = InProcessPublisher(gen, timeout_s=5.0, initial_weights=weights(0.0))
    gen.fail = "always"
    with pytest.raises(PublishError, match="restoring version 0 failed too"):
        pub.publish(weights(1.0), 1)
    gen.fail = None
    with pytest.raises(PublishError, match="publisher is unusable"):
        pub.publish(weights(2.0), 2)


def test_failure_without_initial_weights_says_nothing_could_be_restored():
    gen = RecordingGenerator(weights(0.0))
    gen.fail = "raise"
    pub = InProcessPublisher(gen, timeout_s=5.0)
    with pytest.raises(PublishError, match="no previous weights to restore"):
        pub.publish(weights(1.0), 1)


def test_first_failure_restores_lazily_loaded_initial_weights():
    gen = RecordingGenerator(weights(0.0), version=3)
    loads: list[int] = []
    pub = InProcessPublisher(gen, timeout_s=5.0, initial_version=3,
                             initial_weights=lambda: loads.append(1) or weights(0.0))
    pub.publish(weights(1.0), 4)
    assert loads == []  # loaded only when needed
    gen2 = RecordingGenerator(weights(0.0), version=3)
    pub2 = InProcessPublisher(gen2, timeout_s=5.0, initial_version=3,
                              initial_weights=lambda: loads.append(1) or weights(0.0))
    gen2.fail = "raise"
    with pytest.raises(PublishError, match="restored to version 3"):
        pub2.publish(weights(1.0), 4)
    assert loads == [1] and gen2.version == 3
    assert_weights_equal(gen2.weights, weights(0.0))


def test_checkpoint_weights_reads_safetensors(tmp_path):
    from safetensors.torch import save_file

    save_file(weights(2.0), str(tmp_path / "model.safetensors"))
    assert_weights_equal(checkpoint_weights(str(tmp_path)), weights(2.0))
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors under"):
        checkpoint_weights(str(tmp_path / "nope"))


def test_versions_must_increase():
    pub = InProcessPublisher(RecordingGenerator(weights(0.0)), initial_weights=weights(0.0),
                             initial_version=4)
    with pytest.raises(ValueError, match="version 4 must exceed the last published version 4"):
        pub.publish(weights(1.0), 4)


def test_unknown_transport_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown weight transport 'shm'; known: inprocess, nccl"):
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
    with pytest.raises(PublishError, match="needs CUDA GPUs; on CPU use 'inprocess'"):
        pub.publish(weights(1.0), 1)


@pytest.mark.slow
def test_timed_out_publish_leaves_the_real_engine_on_its_previous_version(engine,
                                                                           tiny_model_path):
    from safetensors.torch import load_file

    from scalerl.envs.base import Sample
    from scalerl.rollout.types import Budget

    base = {}
    for f in sorted(__import__("pathlib").Path(tiny_model_path).glob("*.safetensors")):
        base.update(load_file(str(f)))
    sample = Sample(id="p", task="arith", prompt="Q:12+34=")

    def greedy():
        (r,) = engine.generate([sample], n=1, budget=Budget(answer=16), temperature=0.0,
                               seed=0, score=False)
        return r.token_ids, r.logprobs

    v0 = engine.version
    pub = InProcessPublisher(engine, timeout_s=60.0, initial_weights=base, initial_version=v0,
                             rollback_timeout_s=120.0)
    before = greedy()
    pub.timeout_s = 1e-4  # far shorter than a reload (ms): the publish must time out
    zeroed = {k: torch.zeros_like(v) if "embed" in k or "lm_head" in k else v
              for k, v in base.items()}
    with pytest.raises(PublishTimeout, match=f"version {v0 + 1} .*restored to version {v0}"):
        pub.publish(zeroed, v0 + 1)
    assert engine.version == v0
    assert greedy() == before
