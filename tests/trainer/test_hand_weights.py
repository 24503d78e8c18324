"""Handing weights to the rollout source after each step, for a sharded (FSDP2) policy: the
full weights are gathered only on steps whose weights will be sent (PPO-offpolicy-k: the last
step of a round; held-out validation), each tensor kept in the publisher's form (cast to the
engine's dtype first, then on the host); on other steps nothing is gathered and reading the
weights is an error. One FSDP2 process (gloo) on the tiny random Qwen2."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from conftest import tiny_qwen2

from scalerl.trainer import loop
from scalerl.trainer.config import TrainerConfig, ValConfig
from scalerl.trainer.policy import PolicyModule
from scalerl.trainer.publish import FilesPublisher
from scalerl.trainer.sharding import shard_policy


@pytest.fixture
def sharded():
    policy = shard_policy(PolicyModule(tiny_qwen2()), torch.device("cpu"), bf16=False,
                          fp32_head=True)
    yield policy
    dist.destroy_process_group()


class Engine:
    version = 0
    config = SimpleNamespace(dtype="bfloat16")

    def update_weights(self, named, version, *, timeout_s): ...


class RoundOfTwo:
    """PPO-offpolicy-2's source as the loop sees it: the weights of every second step are sent."""

    def __init__(self):
        self.publisher = FilesPublisher(Engine())
        self.handed: dict[int, object] = {}
        self.step = 0

    def wants_weights(self) -> bool:
        return self.step % 2 == 0

    def on_step(self, version, weights):
        self.handed[version] = weights


def test_a_sharded_policy_is_gathered_only_when_its_weights_are_sent(sharded, monkeypatch):
    gathered = []
    real = loop.gather_weights
    monkeypatch.setattr(loop, "gather_weights",
                        lambda model, prepare=None: gathered.append(1) or real(model, prepare))
    source = RoundOfTwo()
    run = SimpleNamespace(model=sharded, source=source, step=0,
                          cfg=TrainerConfig(steps=10, val=ValConfig(every=5)))
    for step in range(1, 7):
        run.step = source.step = step
        loop.hand_weights(run)
    assert len(gathered) == 4  # steps 2, 4 and 6 (sent), and 5 (validated)
    full = dict(source.handed[4]())
    assert all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in full.values())
    expected = dict(sharded.model.named_parameters())["model.embed_tokens.weight"]
    assert torch.equal(full["model.embed_tokens.weight"], expected.full_tensor().bfloat16())
    with pytest.raises(RuntimeError, match="weights of step 3 were not gathered"):
        source.handed[3]()
