"""Training metrics: per-step figures from rollouts, a compute clock, and the writers.

`rollout_metrics` turns one step's groups into reward, pass-rate, length and finish-reason
figures (and the multi-turn ones: turns, tool calls, tool errors and latency), and
`step_metrics` adds the optimizer step's statistics and the batch filters' counts;
`ComputeClock` accumulates training device-seconds (validation apart) and tokens across resumes;
`MetricsWriter` appends one JSON line per row to metrics.jsonl, writes the samples files
(trainer/samples.py), sends each step whole to the experiment trackers (trainer/tracking.py:
Accelerate's TensorBoard, W&B, trackio, ...) and hands the figures to the console
(trainer/console.py: a progress bar, a line per validation). Stable grouped keys
(`reward/mean`, `loss/clip_frac`, ...). No training here.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scalerl.rollout.episode import ENDINGS
from scalerl.trainer.batch import GroupReport
from scalerl.trainer.filters import Group
from scalerl.trainer.samples import as_table, write_samples
from scalerl.trainer.tracking import Table, Tracking

STEP_KEYS = {"loss": "loss/value", "entropy": "policy/entropy", "clip_frac": "loss/clip_frac",
             "cispo_trunc_frac": "loss/cispo_trunc_frac", "is_ratio": "is_ratio/mean",
             "is_ratio_min": "is_ratio/min", "is_ratio_max": "is_ratio/max",
             "mismatch_kl": "policy/mismatch_kl", "grad_norm": "optim/grad_norm",
             "train_tokens": "batch/train_tokens", "batch/empty": "batch/empty",
             "imbalance": "trainer/imbalance", "micro_batches": "trainer/micro_batches"}
"""The optimizer step's statistics (trainer/step.py) -> their stable metric keys."""


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def reward_metrics(rewarded: tuple[Group, ...] | list[Group]) -> dict[str, float]:
    """reward/mean and reward/<task>: the rewards the step trains with (`Rollout.reward`, as
    trainer/rewards.py assigned them; error verdicts and dropped truncations have none)."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in (r for g in rewarded for r in g):
        by_task[r.task].append(float(r.reward))  # type: ignore[arg-type]
    if not by_task:
        return {}
    out = {"reward/mean": _mean([x for xs in by_task.values() for x in xs])}
    return out | {f"reward/{task}": _mean(xs) for task, xs in sorted(by_task.items())}


def rollout_metrics(groups: list[Group]) -> dict[str, float]:
    """train/<task>/pass_rate and rollout/* of every rollout of one step: finish reasons,
    interruptions (every rollout whose thinking was cut, whatever its finish reason), lengths,
    and the verifier's `error` and `timeout` verdicts apart."""
    rollouts = [r for g in groups for r in g]
    if not rollouts:
        return {}
    by_task: dict[str, list] = defaultdict(list)
    for r in rollouts:
        by_task[r.task].append(r)
    lengths = [len(r.token_ids) for r in rollouts]
    out = {
        "rollout/truncated_frac": _mean([r.finish_reason == "truncated" for r in rollouts]),
        "rollout/interrupted_frac": _mean([r.interrupted for r in rollouts]),
        "rollout/length_mean": _mean(lengths),
        "rollout/length_max": float(max(lengths)),
        "rollout/length_min": float(min(lengths)),
        "rollout/thinking_tokens_mean": _mean([r.thinking_tokens for r in rollouts]),
        "rollout/answer_tokens_mean": _mean([r.answer_tokens for r in rollouts]),
        "rollout/error_frac": _mean([r.score.status == "error" for r in rollouts]),
        "rollout/timeout_frac": _mean([r.score.status == "timeout" for r in rollouts]),
        "rollout/count": float(len(rollouts)),
    }
    for task, rs in sorted(by_task.items()):
        out[f"train/{task}/pass_rate"] = _mean([r.score.correct for r in rs])
        out |= credit_metrics(rs, f"train/{task}/")
    return out | turn_metrics(rollouts, by_task)


CREDIT_QUANTILES = (0.1, 0.5, 0.9)
"""The quantiles of a graded task's credit each step logs."""


def credit_metrics(rollouts: list, prefix: str) -> dict[str, float]:
    """A graded task's credit (`Score.reward`, in [0, 1]) of the rollouts that have one: its
    mean, `credit_p10/p50/p90` and `credit_full_frac` (full credit); nothing for a task whose
    verdicts are all-or-nothing."""
    credits = sorted(float(r.score.reward) for r in rollouts if r.score.reward is not None)
    if not credits:
        return {}
    out = {f"{prefix}credit_mean": _mean(credits),
           f"{prefix}credit_full_frac": _mean([c >= 1.0 for c in credits])}
    for q in CREDIT_QUANTILES:
        out[f"{prefix}credit_p{round(q * 100)}"] = credits[min(len(credits) - 1,
                                                             int(q * len(credits)))]
    return out


def _turns(r) -> int:
    """Assistant turns of a rollout: a single-turn rollout has one."""
    return sum(t.role == "assistant" for t in r.turns) if r.turns else 1


def _tool_figures(rollouts: list, prefix: str) -> dict[str, float]:
    calls = [c for r in rollouts for c in r.tool_calls]
    out = {f"{prefix}turns_mean": _mean([_turns(r) for r in rollouts]),
           f"{prefix}tool_calls_mean": _mean([len(r.tool_calls) for r in rollouts])}
    if calls:
        out[f"{prefix}tool_error_frac"] = _mean([c["status"] != "ok" for c in calls])
    return out


def turn_metrics(rollouts: list, by_task: dict[str, list]) -> dict[str, float]:
    """Multi-turn figures: `rollout/turns_mean` (assistant turns; a single-turn rollout has
    one) and `rollout/tool_calls_mean` every step, so their keys are stable whatever the tasks;
    `rollout/tool_error_frac` (calls whose status is not `ok`, of all calls) and
    `tool/latency_s` (mean seconds per call) only in steps with tool calls (a fraction of no
    calls is undefined, not 0); per task, `train/<task>/turns_mean`, `.../tool_calls_mean`
    and `.../tool_error_frac` for the tasks played in turns (an environment's rollouts always
    record their turns), so single-turn tasks add no keys; in steps with such rollouts,
    `rollout/ended_<ending>_frac` for every way an episode ends but `done` (max_turns,
    turn_budget, budget, max_model_len: truncated; session_failed, env_error: error verdicts),
    of all the step's rollouts."""
    out = _tool_figures(rollouts, "rollout/")
    latencies = [float(c["latency_s"]) for r in rollouts for c in r.tool_calls]
    if latencies:
        out["tool/latency_s"] = _mean(latencies)
    if any(r.turns for r in rollouts):  # how episodes ended (rollout/episode.py ENDINGS)
        for ending in ENDINGS[1:]:
            out[f"rollout/ended_{ending}_frac"] = _mean([r.meta.get("ended") == ending
                                                        for r in rollouts])
    for task, rs in sorted(by_task.items()):
        if any(r.turns for r in rs):
            out |= _tool_figures(rs, f"train/{task}/")
    return out


def step_metrics(groups: list[Group], report: GroupReport, gen: dict[str, float],
                 stats: dict[str, float], *, train_s: float, retired: int, prompts: int,
                 lr: float) -> dict[str, float]:
    """Everything one optimizer step logs but the compute axis: the rollouts' figures, the
    generator's (`gen`), the step's statistics under `STEP_KEYS`, the batch filters' counts
    (`retired` of `prompts` training prompts retired so far) and the trainer's throughput."""
    metrics = rollout_metrics(groups) | reward_metrics(report.rewarded) | gen
    metrics |= {STEP_KEYS[k]: v for k, v in stats.items() if k in STEP_KEYS}
    return metrics | {
        "batch/zero_variance_frac": report.zero_variance / max(report.groups_in, 1),
        "batch/retired_frac": retired / max(prompts, 1),
        "batch/retired_now": float(report.retired),
        "batch/truncated_dropped": float(report.truncated_dropped),
        "batch/error_excluded_frac": report.error_excluded_frac,
        "batch/error_groups_dropped": float(report.error_groups_dropped),
        "trainer/tokens_per_s": stats.get("tokens_total", 0.0) / max(train_s, 1e-9),
        "trainer/step_s": train_s, "optim/lr": lr,
    }


class ComputeClock:
    """Cumulative training compute: device-seconds (wall x the devices the run holds), GPU-hours,
    generated/trained tokens. Time spent inside `apart()` (held-out validation) is not training
    compute, the paper's x-axis: it is counted separately, as `compute/val_device_s`."""

    def __init__(self, devices: int, on_gpu: bool):
        self.devices, self.on_gpu = devices, on_gpu
        self.device_s = 0.0
        self.val_device_s = 0.0
        self.gen_tokens = 0
        self.train_tokens = 0
        self._last = time.perf_counter()

    def tick(self, gen_tokens: int = 0, train_tokens: int = 0) -> dict[str, float]:
        now = time.perf_counter()
        self.device_s += (now - self._last) * self.devices
        self._last = now
        self.gen_tokens += gen_tokens
        self.train_tokens += train_tokens
        return self.totals()

    def totals(self) -> dict[str, float]:
        """The compute axis as it stands (nothing added): what a validation row carries."""
        out = {"compute/device_s": self.device_s, "compute/gen_tokens": float(self.gen_tokens),
               "compute/train_tokens": float(self.train_tokens),
               "compute/val_device_s": self.val_device_s}
        if self.on_gpu:
            out["compute/gpu_hours"] = self.device_s / 3600.0
        return out

    @contextmanager
    def apart(self) -> Iterator[None]:
        """Time inside is left out of `compute/device_s` (and counted in val_device_s)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - start
            self._last += took
            self.val_device_s += took * self.devices

    def state_dict(self) -> dict[str, float]:
        return {"device_s": self.device_s, "gen_tokens": self.gen_tokens,
                "train_tokens": self.train_tokens, "val_device_s": self.val_device_s}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.device_s = float(state["device_s"])
        self.val_device_s = float(state.get("val_device_s", 0.0))
        self.gen_tokens = int(state["gen_tokens"])
        self.train_tokens = int(state["train_tokens"])
        self._last = time.perf_counter()


class MetricsWriter:
    """metrics.jsonl, the samples files, the experiment trackers and the console of one run.

    Every row goes to metrics.jsonl at once (the source of truth); the trackers get each step
    whole, once, at `end_step` (the step's training figures, its validation and its samples
    table together), so a tracker that commits a step when it is sent (W&B) never holds one."""

    def __init__(self, run_dir: Path, *, total_steps: int, progress: bool = True,
                 start_step: int = 0, tracking: Tracking | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")
        self.tracking = tracking
        self._staged: dict[str, Any] = {}
        self._tables: dict[str, Table] = {}
        self._console = None
        if progress:
            from scalerl.trainer.console import StepConsole

            self._console = StepConsole(total_steps, start_step)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, "time": time.time(), **metrics}
        self._file.write(json.dumps(row, allow_nan=True) + "\n")
        self._file.flush()
        self._staged |= metrics
        if self._console is None:
            return
        if any(k.startswith("val/") for k in metrics):
            self._console.validation(step, metrics)
        elif "loss/value" in metrics or "batch/empty" in metrics:
            self._console.step(step, metrics)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Step `step`'s rollout samples: samples/step_NNNNNN.jsonl now, a table for the
        trackers that take tables at `end_step`."""
        write_samples(self.run_dir, step, rows)
        self._tables[f"samples/step_{step:06d}"] = as_table(rows)

    def end_step(self, step: int) -> None:
        """Send step `step`, whole, to the trackers (once: trainer/tracking.py)."""
        if self.tracking is not None and (self._staged or self._tables):
            self.tracking.log(step, self._staged, self._tables)
        self._staged, self._tables = {}, {}

    def print(self, text: str) -> None:
        """Print a line with rich markup (above the progress bar when there is one)."""
        if self._console is not None:
            self._console.print(text)
        else:
            from rich.console import Console

            Console().print(text)

    def close(self) -> None:
        self._file.close()
        if self.tracking is not None:
            self.tracking.finish()
        if self._console is not None:
            self._console.close()


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Drop rows logged after `last_step` (a killed run's steps past its last checkpoint)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in keep))
