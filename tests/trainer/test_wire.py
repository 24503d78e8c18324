"""Rank 0's step to the other ranks (trainer/wire.py) under a real 2-rank gloo torchrun: the
groups without their tokens and rank 0's collated tensors give every rank the very micro-batches
it trained on when every rollout was pickled to it and it collated them itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).parent / "wire_worker.py"
pytestmark = pytest.mark.slow  # two torch processes: ~20 s on 2 cores


def test_the_tensor_broadcast_gives_each_rank_the_batches_it_collated_before(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(WORKER),
                           str(tmp_path)], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["tokens_received"] > 0 and ranks[1]["tokens_received"] == 0  # no tokens sent
    for rank, got in enumerate(ranks):
        assert got["report"] == got["report_before"]
        assert got["report"][4] == 1 and got["report"][3] == 1  # the error and the truncated
        assert 0 < got["rows"] < 48
        assert len(got["new"]) == len(got["old"]) > 0, rank
        for new, old in zip(got["new"], got["old"], strict=True):
            assert new.keys() == old.keys()
            for name in new:
                assert new[name].dtype == old[name].dtype, (rank, name)
                assert torch.equal(new[name], old[name]), (rank, name)
