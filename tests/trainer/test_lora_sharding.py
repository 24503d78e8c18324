"""A LoRA policy (PEFT adapters on a frozen base) on 2 gloo ranks under torchrun, DDP and FSDP2
(torch 2.13's fully_shard with frozen and trainable parameters in one decoder layer), takes the
steps of one whole process: the same losses, the same adapter (gathered under PEFT's names), the
base untouched. The other ranks build the model on meta and receive rank 0's, as the glue does.
Slow: three torchrun launches of ~5 s each.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "lora_worker.py"


def launch(nproc: int, out: Path, *args: str) -> dict:
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(nproc), str(WORKER),
           "--out", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora")
    return {"whole": launch(1, tmp / "whole.pt"), "ddp": launch(2, tmp / "ddp.pt"),
            "fsdp2": launch(2, tmp / "fsdp2.pt", "--shard")}


def test_only_the_adapter_trains(runs):
    whole = runs["whole"]
    # rank 4 on q_proj (64 -> 64), v_proj (64 -> 64: 1 kv head of 64) and down_proj (128 -> 64)
    # in 2 layers: A (4 x in) + B (out x 4) = 512 + 512 + 768 per layer
    assert whole["trainable"] == 2 * (512 + 512 + 768)
    assert len(whole["adapter"]) == 2 * 3 * 2
    b = whole["adapter"]["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"]
    assert b.dtype == torch.float32 and b.abs().max() > 0  # B starts at zero: it moved
    for name, tensor in whole["base_before"].items():
        assert torch.equal(whole["base_after"][name], tensor), name


@pytest.mark.parametrize("layout", ["ddp", "fsdp2"])
def test_two_ranks_take_the_steps_of_one_process(runs, layout):
    whole, two = runs["whole"], runs[layout]
    assert two["world"] == 2
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(whole["losses"]),
                               rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(torch.tensor(two["grad_norms"]),
                               torch.tensor(whole["grad_norms"]), rtol=1e-4, atol=1e-6)
    assert sorted(two["adapter"]) == sorted(whole["adapter"])
    for name, tensor in whole["adapter"].items():  # 3 AdamW steps of lr 1e-2
        torch.testing.assert_close(two["adapter"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    for name, tensor in whole["base_before"].items():  # rank 0's, broadcast, never stepped
        assert torch.equal(two["base_after"][name], tensor), name
