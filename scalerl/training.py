"""Glue for one training run: the model, the accelerator, the generator and the tasks, then
`trainer.offpolicy.train`.

`run_training(cfg, run_dir, model_path, ckpt)` is what `scalerl train`, `scalerl bench train` and
the tests call: it applies the run's sandbox settings, builds the policy and Accelerate, starts
the vLLM Generator on rank 0 with the policy's LM-head precision, resolves the task mixture and
trains. No argument parsing, no printing of results (scalerl/commands/train.py does that).
"""

from __future__ import annotations

import threading
from pathlib import Path

from scalerl.config import RunConfig


def build_accelerator(dtype: str):
    import torch
    from accelerate import Accelerator

    on_gpu = torch.cuda.is_available()
    mixed = "bf16" if on_gpu and dtype == "auto" else "no"
    return Accelerator(cpu=not on_gpu, mixed_precision=mixed)


def policy_dtype(dtype: str) -> str:
    """`auto`: float32 weights (bf16 autocast on GPU comes from the Accelerator)."""
    return "float32" if dtype == "auto" else dtype


def apply_sandbox(cfg: RunConfig) -> None:
    """The run's `sandbox:` section: the code sandbox's backend, workers and limits, and the
    math verifier's pool size."""
    import scalerl.sandbox
    from scalerl.envs.math import configure_pool

    scalerl.sandbox.configure(cfg.sandbox)
    configure_pool(cfg.sandbox.verify_workers)


def run_training(cfg: RunConfig, run_dir: Path, model_path: str, ckpt: Path | None = None):
    """Build model, generator and tasks; train; return the Run (None on ranks other than 0)."""
    from transformers import AutoTokenizer

    from scalerl.envs.catalog import get_task
    from scalerl.rollout.engine import Generator
    from scalerl.rollout.weights import check_precision_match
    from scalerl.trainer.offpolicy import TrainTask, train
    from scalerl.trainer.policy import load_policy
    from scalerl.trainer.publish import make_publisher

    apply_sandbox(cfg)
    accelerator = build_accelerator(cfg.policy.dtype)
    model = load_policy(model_path, policy_dtype(cfg.policy.dtype))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tasks = {t.name: TrainTask(get_task(t.name), t.budget, t.weight) for t in cfg.tasks}
    generator = publisher = None
    if accelerator.is_main_process:
        generator = Generator(model_path, config=cfg.engine, fp32_head=cfg.policy.fp32_head)
        check_precision_match(generator.fp32_head, cfg.policy.fp32_head)
        publisher = make_publisher(cfg.engine.weight_transfer, generator)
    set_cpu_threads(cfg.policy.cpu_threads)  # after the engine starts: its processes keep theirs
    try:
        run = train(cfg, model=model, tokenizer=tokenizer, generator=generator, tasks=tasks,
                    run_dir=run_dir, accelerator=accelerator, resume_from=ckpt,
                    publisher=publisher)
    finally:
        if generator is not None:
            generator.close()
    return run if accelerator.is_main_process else None


def set_cpu_threads(threads: int | None) -> None:
    """The trainer's torch threads on CPU (`policy.cpu_threads`); GPU runs keep torch's default.

    No core pinning: keeping the trainer off the core vLLM binds its worker to was measured
    slower (PipelineRL-8 0.33 vs 0.42 steps/s on 2 cores): vLLM's scheduler process and its
    output handling need the other core, and the worker's core has gaps the trainer fills."""
    import torch

    if threads is not None and not torch.cuda.is_available():
        torch.set_num_threads(threads)


class PeakRSS:
    """Samples the resident memory of this process and all its children in the background."""

    def __init__(self, every_s: float = 0.5):
        from scalerl.rollout.engine_config import process_tree_rss_mb

        self._measure = process_tree_rss_mb
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._measure()["total_mb"])
            self._stop.wait(every_s)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak_mb
