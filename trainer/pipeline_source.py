"""The PipelineRL-k rollout source (`offpolicy.mode: pipelinerl`) for the trainer's loop.

Wraps `rollout.pipeline.PipelineRL` behind the loop's `RolloutSource` calls: `next_groups` takes
the next ordered, lag-bounded batch (waiting only when the trainer is `max_lag` versions ahead),
`on_step` publishes the new weights into the running generator at once (in flight). The pipeline
starts on the first `next_groups`, after any `load_state_dict`. The rollouts in flight, the batch
wait and the stall limit are the run's `offpolicy.max_in_flight`, `batch_wait_s` and `stall_s`;
an expired wait is a `GeneratorUnavailable` (the loop checkpoints and stops). No optimisation or
logging here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from scalerl.rollout.pipeline import PipelineRL, in_flight_prompts
from scalerl.trainer.filters import Group
from scalerl.trainer.publish import Publisher, make_publisher, publish_metrics
from scalerl.trainer.sources import LazyWeights, SourceSettings, round_seed, skip_too_long
from scalerl.trainer.stopping import StepAbandoned


def generator_busy_s(metrics: dict[str, float]) -> float:
    """Seconds the generator has been busy since the pipeline started (wall minus idle)."""
    return metrics.get("async/wall_s", 0.0) - metrics.get("async/generator_idle_s", 0.0)


def prompts_hash(sample_ids: list[str]) -> float:
    """A metric-sized fingerprint of a batch's prompts in order (resume tests compare it)."""
    digest = hashlib.blake2b("|".join(sample_ids).encode(), digest_size=4).digest()
    return float(int.from_bytes(digest, "little") % 2**24)  # exact in a float32 log


class PipelineSource:
    """RolloutSource for PipelineRL-k: streaming generation, in-flight updates, bounded lag."""

    streams = True  # training rollouts generate beside a validation on the same engines

    def __init__(self, generator: Any, sampler: Any, s: SourceSettings,
                 publisher: Publisher | None = None):
        b = s.prompts_per_step
        self.generator, self.settings = generator, s
        self.pipeline = PipelineRL(
            generator, sampler, n=s.rollouts_per_prompt, groups_per_batch=b, max_lag=s.max_lag,
            budget=dict(s.budgets), temperature=s.temperature, seed=s.seed,
            seed_fn=lambda seq: round_seed(s.seed, seq // b),
            max_in_flight=in_flight_prompts(
                n=s.rollouts_per_prompt, groups_per_batch=b, max_lag=s.max_lag,
                rollouts=s.max_in_flight),
            batch_wait_s=s.batch_wait_s, stall_s=s.stall_s)
        self.publisher = publisher or make_publisher("files", generator)
        self._started = False
        self._sync: dict[str, float] = {}
        self.sync_s = 0.0
        self._served_tokens = 0  # tokens of every batch served so far
        self.stop: Callable[[], str | None] = lambda: None
        """Why a stop was asked (the loop's StopRequest), or None: ends the wait for a batch."""

    def next_groups(self, trainer_version: int) -> tuple[list[Group], dict[str, float]]:
        if not self._started:
            self.pipeline.start()
            self._started = True
        batch = self.pipeline.take_batch(trainer_version, interrupt=self._interrupt)
        metrics = self.pipeline.metrics(batch) | self._sync
        self._sync = {}
        tokens = sum(len(r.token_ids) for r in batch.rollouts)
        metrics["rollout/round_tokens"] = float(tokens)
        # Over the whole run, not per batch: a batch served from the buffer was generated during
        # earlier busy time, and the busy time between two takes can be ~0 (buffer full).
        self._served_tokens += tokens
        busy = max(generator_busy_s(metrics), 1e-9)
        metrics["rollout/tokens_per_s"] = self._served_tokens / busy
        metrics["async/batch_prompts_hash"] = prompts_hash(
            [f"{g.sample.task}/{g.sample.id}" for g in batch.groups])
        groups, skipped = skip_too_long([list(g.rollouts) for g in batch.groups])
        return groups, metrics | skipped | self.generator.metrics()

    def _interrupt(self) -> None:
        """Called while waiting for a batch: a stop asked ends the wait (no batch taken)."""
        reason = self.stop()
        if reason is not None:
            raise StepAbandoned("the wait for the next batch")

    def on_step(self, version: int, weights: LazyWeights) -> dict[str, float]:
        """Publish policy `version` into the generator now (mid-generation)."""
        if version == self.generator.version:
            return {}
        stats = self.publisher.publish(weights(), version)
        self.sync_s += stats.send_s
        self._sync = publish_metrics(stats, self.publisher, stats.send_s)
        return dict(self._sync)

    def wants_weights(self) -> bool:
        return True  # every step's weights are published in flight

    def ensure_synced(self) -> dict[str, float]:
        return {}  # on_step already published; the generator holds the latest weights

    def idle(self) -> dict[str, float]:
        m = self.pipeline.metrics() if self._started else {}
        return {"gen_s": generator_busy_s(m), "sync_s": self.sync_s,
                "generator_idle_s": m.get("async/generator_idle_s", 0.0),
                "trainer_wait_s": m.get("async/trainer_wait_s", 0.0),
                "pipeline_wall_s": m.get("async/wall_s", 0.0)}

    def state_dict(self) -> dict[str, Any]:
        return self.pipeline.state_dict()

    def snapshot(self) -> Callable[[], dict[str, Any]]:
        return self.pipeline.snapshot()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "buffer" not in state:
            raise ValueError("checkpoint source state is not PipelineRL's (no 'buffer'); it was "
                             "written in another offpolicy.mode: resume with that mode")
        self.pipeline.load_state_dict(state)

    def close(self) -> None:
        if self._started:
            self.pipeline.stop()
        self.publisher.close()
