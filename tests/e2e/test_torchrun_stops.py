"""Stops under a real `torchrun --nproc_per_node 2` (CPU, gloo) end in a checkpoint, and
`--resume` continues.

A real `scalerl train` (vLLM-CPU on rank 0, the tiny model, PipelineRL-2) launched as the docs
say. Phase 1: SIGTERM to the torchrun agent (what SLURM's and Kubernetes' preemption send): the
agent forwards it to both workers and kills them 30 s later (its default `--shutdown-timeout`);
the workers stop at the next micro-batch or wait for a batch, checkpoint the last completed step
and leave `stopped.json` within that time. Phase 2: `--resume` under the documented SLURM batch
script (torchrun with SIGUSR1 in `--signals-to-handle`, started in the background, the shell's
trap passing SIGUSR1 on to it), SIGUSR1 sent to that shell as `#SBATCH --signal=B:USR1@...`
does: the same. Phase 3: `--resume` to the end: every step logged once, in order, each resumed
run starting at the step after its checkpoint. Three engine starts (~3 min here).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from run_steps import logged_steps, wait_for_step

pytestmark = pytest.mark.slow

STEPS = 8
SETTINGS = ["offpolicy.mode=pipelinerl", "offpolicy.max_lag=1", "offpolicy.prompts_per_step=4",
            "offpolicy.rollouts_per_prompt=2", "offpolicy.micro_batch_size=1", "val.every=0",
            "checkpoint.every=0", "checkpoint.keep=1", "filters.retire=false",
            "log.progress=false", "log.trackers=[]", f"steps={STEPS}",
            "tasks=[{name: arith, budget: {thinking: 48, answer: 16}}]"]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
HANDLED = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
"""The launch line of docs/commands/train.md: SIGUSR1 forwarded instead of killing the agent."""
BATCH_SCRIPT = """trap 'kill -USR1 "$pid" 2>/dev/null' USR1
"$@" &
pid=$!
wait "$pid"; code=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; code=$?; done
exit "$code"
"""
"""The documented SLURM batch script's signal handling (docs/commands/train.md)."""


def launch(run_dir: Path, *args: str, batch_script: bool = False) -> subprocess.Popen:
    torchrun = [TORCHRUN, "--standalone", "--nproc_per_node", "2"]
    if batch_script:
        torchrun += ["--signals-to-handle", HANDLED, "--shutdown-timeout", "120"]
    cmd = [*torchrun, "-m", "scalerl", "train", "--run-dir", str(run_dir), *args]
    if batch_script:
        cmd = ["bash", "-c", BATCH_SCRIPT, "batch", *cmd]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)


def finish(proc: subprocess.Popen, timeout_s: float = 300) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, err


def checkpointed(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*"))


def stopped_on(run_dir: Path, proc: subprocess.Popen, sig: signal.Signals, err: str) -> int:
    """The step a signalled run stopped at, after checking what it left."""
    record = json.loads((run_dir / "stopped.json").read_text())
    print(f"{sig.name}: {record['reason']}")  # which way it stopped (pytest -s shows it)
    assert record["exit_code"] == 75 and record["resumable"] is True, record
    assert f"on {sig.name}" in record["reason"], (record, err[-3000:])
    assert "SIGKILL" not in err and "forcefully exiting" not in err, err[-3000:]
    step = record["step"]
    assert checkpointed(run_dir) == [step], checkpointed(run_dir)  # keep=1: this one
    assert logged_steps(run_dir) == list(range(1, step + 1))
    assert (run_dir / "checkpoints" / f"step-{step:06d}" / "trainer_state.pt").exists()
    return step


def test_sigterm_to_torchrun_and_sigusr1_to_the_slurm_script_each_checkpoint_and_resume(
        tmp_path):
    run_dir = tmp_path / "run"
    sets = [a for s in SETTINGS for a in ("--set", s)]
    proc = launch(run_dir, *sets)
    wait_for_step(proc, run_dir, 2, timeout_s=600)
    proc.send_signal(signal.SIGTERM)  # the agent, as a scheduler's preemption does
    code, err = finish(proc)
    assert code != 0, err[-3000:]
    termed = stopped_on(run_dir, proc, signal.SIGTERM, err)
    assert 2 <= termed < STEPS

    proc = launch(run_dir, "--resume", batch_script=True)
    wait_for_step(proc, run_dir, termed + 1, timeout_s=600)
    assert not (run_dir / "stopped.json").exists()  # a run that starts again clears it
    proc.send_signal(signal.SIGUSR1)  # the batch shell, as `--signal=B:USR1@600` does
    code, err = finish(proc)
    assert code != 0, err[-3000:]
    usr1 = stopped_on(run_dir, proc, signal.SIGUSR1, err)
    assert termed < usr1 < STEPS

    code, err = finish(launch(run_dir, "--resume"))
    assert code == 0, err[-3000:]
    assert logged_steps(run_dir) == list(range(1, STEPS + 1))  # none repeated, none skipped
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    batches = [r["async/batch_index"] for r in rows if "async/batch_index" in r]
    assert batches == list(range(STEPS))  # each PipelineRL batch trained once, in order
    assert not (run_dir / "stopped.json").exists()
    assert checkpointed(run_dir) == [STEPS]
