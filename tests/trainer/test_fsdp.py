"""FSDP2 (`policy.sharding: fsdp2`) on 2 gloo processes under torchrun, against 1 process.

The same AdamW steps (gradient clipping binding, micro-batches of 2) on the same global batches
give the same losses and weights sharded over 2 ranks (with gradient checkpointing) as whole in 1
process, and sharded in 1 process (a one-rank group); the gathered full
weights make a checkpoint transformers loads; the optimizer state saved per rank resumes exactly.
Each model is run twice in one launch: with a tied and with an untied LM head. Slow: four
torchrun launches of ~15 s each (imports dominate).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "fsdp_worker.py"


def launch(nproc: int, out: Path, *args: str) -> dict:
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(nproc),
           str(WORKER), "--out", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    whole = launch(1, tmp / "whole.pt")
    single = launch(1, tmp / "single.pt", "--shard")
    sharded = launch(2, tmp / "sharded.pt", "--shard", "--save-at", "2", "--run-dir",
                     str(tmp / "run"))
    resumed = launch(2, tmp / "resumed.pt", "--shard", "--save-at", "2", "--run-dir",
                     str(tmp / "run"), "--resume")
    return {"whole": whole, "single": single, "sharded": sharded, "resumed": resumed,
            "dir": tmp / "run"}


@pytest.mark.parametrize("sharded_run", ["sharded", "single"])
@pytest.mark.parametrize("head", ["tied", "untied"])
def test_sharded_ranks_take_the_steps_of_one_whole_process(runs, head, sharded_run):
    whole, sharded = runs["whole"], runs[sharded_run]
    assert (whole["world"], sharded["world"]) == (1, 2 if sharded_run == "sharded" else 1)
    a, b = whole[head], sharded[head]
    assert len(a["losses"]) == 3 and all(n > 0.5 for n in a["grad_norms"]), a["grad_norms"]
    torch.testing.assert_close(torch.tensor(b["losses"]), torch.tensor(a["losses"]),
                               rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(torch.tensor(b["grad_norms"]), torch.tensor(a["grad_norms"]),
                               rtol=1e-4, atol=1e-6)
    assert sorted(b["weights"]) == sorted(a["weights"])
    # AdamW divides by the root of the second moment, so roundoff in a near-zero gradient could
    # move a weight by lr (3e-3) either way: the worker's eps (1e-6) damps gradients at roundoff
    # level; 1e-5 is 0.3% of one step's largest move.
    for name, tensor in a["weights"].items():
        torch.testing.assert_close(b["weights"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_tied_head_is_published_once_under_the_embedding_name(runs):
    names = set(runs["sharded"]["tied"]["weights"])
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert "lm_head.weight" in runs["sharded"]["untied"]["weights"]


@pytest.mark.parametrize("head", ["tied", "untied"])
def test_checkpoint_of_sharded_ranks_is_a_model_transformers_loads(runs, head):
    from transformers import AutoModelForCausalLM

    path = runs["dir"] / head / "checkpoints" / "step-000002"
    assert sorted(p.name for p in (path / "optimizer").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]  # one shard per rank
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert loaded.config.tie_word_embeddings == (head == "tied")
    if head == "tied":
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    # the checkpoint holds step 2's weights: a resumed run's step 3 from them equals step 3
    resumed, sharded = runs["resumed"][head], runs["sharded"][head]
    assert len(resumed["losses"]) == 1
    assert resumed["losses"][0] == sharded["losses"][2]
    for name, tensor in sharded["weights"].items():
        assert torch.equal(resumed["weights"][name], tensor), name
