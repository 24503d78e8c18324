"""Two gloo processes (torchrun) take the same optimizer step as one process on the same batch.

design.md: `accelerate launch --cpu --num_processes 2` started only one process on these
machines, so the ranks are started with torchrun and `Accelerator(cpu=True)`.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).parent / "ddp_worker.py"


def run_ranks(nproc: int, out: Path, micro: int, *tokens: str) -> dict:
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(nproc),
           str(WORKER), str(out), str(micro), *tokens]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def one(tmp_path_factory) -> dict:
    return run_ranks(1, tmp_path_factory.mktemp("one") / "one.pt", micro=12)


def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path, one):
    two = run_ranks(2, tmp_path / "two.pt", micro=2)  # 6 rows per rank in 3 micro-batches
    assert (one["world"], two["world"]) == (1, 2)
    assert not torch.equal(one["weights"], torch.zeros_like(one["weights"]))
    torch.testing.assert_close(two["weights"], one["weights"])
    torch.testing.assert_close(torch.tensor(two["loss"]), torch.tensor(one["loss"]))


def test_two_processes_packed_by_tokens_match_one_process(tmp_path, one):
    # rows of 5, 6, 7, 8, 8, 9, 10, 11, 11, 12, 13, 13 tokens in bins of 56: 13 + 13 + 12 + 11
    # + 7 (rank 0), 11 + 10 + 9 + 8 + 8 + 6 (rank 1), then 5 alone (rank 1, by the snaking
    # deal), so rank 0's second micro-batch is the 2-token dummy, synced with rank 1's
    two = run_ranks(2, tmp_path / "two.pt", 64, "56")
    assert two["world"] == 2
    torch.testing.assert_close(two["weights"], one["weights"])
    torch.testing.assert_close(torch.tensor(two["loss"]), torch.tensor(one["loss"]))
