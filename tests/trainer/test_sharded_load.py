"""Loading a policy on several ranks: only rank 0 reads the weights (the others build the model
on `meta` from its config and receive them: not one host copy of the whole fp32 model per rank,
7 x 32 GB for 8B), sharded by FSDP2 or whole under DDP; every rank then holds rank 0's weights:
each gives a whole model's logprobs, and the weights gather back to the checkpoint exactly.
2 gloo processes under torchrun on the tiny model (tied head, RoPE buffers). Slow: two launches
(~20 s each)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
WORKER = Path(__file__).parent / "load_worker.py"


@pytest.mark.parametrize("sharding", ["fsdp2", "none"])
def test_only_rank_0_reads_the_weights_and_every_rank_holds_them(tiny_model_path, tmp_path,
                                                                  sharding):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from scalerl.trainer.policy import token_stats

    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(WORKER),
           "--model", tiny_model_path, "--out", str(tmp_path / "out.pt"), "--sharding", sharding]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = torch.load(tmp_path / "out.pt")
    assert out["reads"] == [1, 0]
    files = {}
    for f in sorted(Path(tiny_model_path).glob("*.safetensors")):
        files.update(load_file(str(f)))
    assert set(out["weights"]) == set(files)
    for name, tensor in files.items():
        assert torch.equal(out["weights"][name], tensor.float()), name
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    rows = torch.tensor([[5, 9, 11, 7, 3, 30, 12, 8], [6, 6, 21, 4, 2, 19, 0, 0]])
    with torch.no_grad():
        whole = token_stats(model, rows, (rows > 0).long(), torch.tensor([3, 3]),
                            torch.tensor([5, 3])).logprobs
    for logprobs in out["logprobs"]:  # every rank's
        torch.testing.assert_close(logprobs, whole)
