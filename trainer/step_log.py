"""The training metrics of one step: what `train()` logs after each optimizer step.

`log_step` gathers the rollout figures, the loss statistics under their stable keys
(`STEP_KEYS`), the batch filters' counts, throughput and the compute axis, writes them, and warns
on too many truncated rollouts and (once per task) on prompts too long for the engine. It does
not decide anything about the run (trainer/offpolicy.py does).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from scalerl.trainer.batch import GroupReport
from scalerl.trainer.filters import Group
from scalerl.trainer.metrics import rollout_metrics

if TYPE_CHECKING:
    from scalerl.trainer.offpolicy import Run

STEP_KEYS = {"loss": "loss/value", "entropy": "policy/entropy", "clip_frac": "loss/clip_frac",
             "cispo_trunc_frac": "loss/cispo_trunc_frac", "is_ratio": "is_ratio/mean",
             "is_ratio_min": "is_ratio/min", "is_ratio_max": "is_ratio/max",
             "mismatch_kl": "policy/mismatch_kl", "grad_norm": "optim/grad_norm",
             "train_tokens": "batch/train_tokens", "batch/empty": "batch/empty"}


def log_step(run: Run, groups: list[Group], report: GroupReport, gen: dict[str, float],
             stats: dict[str, float], train_s: float) -> None:
    if run.writer is None:
        return
    metrics = rollout_metrics(groups) | gen
    metrics |= {STEP_KEYS[k]: v for k, v in stats.items() if k in STEP_KEYS}
    metrics |= {
        "batch/zero_variance_frac": report.zero_variance / max(report.groups_in, 1),
        "batch/retired_frac": len(run.retirement.retired) / max(total_prompts(run), 1),
        "batch/retired_now": float(report.retired),
        "batch/truncated_dropped": float(report.truncated_dropped),
        "batch/error_excluded_frac": report.error_excluded_frac,
        "batch/error_groups_dropped": float(report.error_groups_dropped),
        "trainer/tokens_per_s": stats.get("tokens_total", 0.0) / max(train_s, 1e-9),
        "trainer/step_s": train_s, "optim/lr": run.scheduler.get_last_lr()[0],
    }
    gen_tokens = sum(len(r.token_ids) for g in groups for r in g)
    metrics |= run.clock.tick(gen_tokens, int(stats.get("train_tokens", 0)))
    run.writer.log(run.step, metrics)
    trunc = metrics.get("rollout/truncated_frac", 0.0)
    if trunc > run.cfg.log.truncation_warn:
        message = (f"step {run.step}: {trunc:.1%} of rollouts truncated (> "
                   f"{run.cfg.log.truncation_warn:.0%}; the paper saw 10-15% destabilise runs)")
        run.writer.print(f"[yellow]warning:[/] {message}")
    warn_too_long(run, metrics)


def warn_too_long(run: Run, metrics: dict[str, float]) -> None:
    """One warning per task whose prompts do not fit `max_model_len` (they are skipped)."""
    prefix = "rollout/prompt_too_long/"
    for key in sorted(k for k in metrics if k.startswith(prefix)):
        task = key[len(prefix):]
        if task not in run.warned_too_long:
            run.warned_too_long.add(task)
            message = (f"step {run.step}: task {task} has prompts too long for the engine's "
                       "max_model_len with their budget; they are skipped (counted in "
                       "rollout/prompt_too_long): raise engine.max_model_len or lower the budget")
            warnings.warn(message, stacklevel=1)
            run.writer.print(f"[yellow]warning:[/] {message}")


def total_prompts(run: Run) -> int:
    return sum(len(t.task.samples("train")) for t in run.tasks.values())
