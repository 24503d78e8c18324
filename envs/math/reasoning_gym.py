"""`rg:<dataset>`: reasoning-gym's math generators as tasks (offline, seedable).

Train is `create_dataset(name, size=train_size, seed=seed)`; test uses a fixed seed, and its
prompts are removed from train by the hash check. Datasets whose answers are numbers are scored
by math-verify (the `math` kind); the others (polynomials, times, hex, points, ...) by
reasoning-gym's own `score_answer` on the last `\\boxed{}` of the completion, run in a small
process pool under a hard deadline. Only the math modules' generators are offered.
"""

from __future__ import annotations

import threading
from typing import Any

from scalerl.envs.base import Sample, Score, truncate
from scalerl.envs.data import assign_splits, prompt_key
from scalerl.envs.deadline_pool import Pool
from scalerl.envs.grading import Grading
from scalerl.envs.math.files import last_boxed
from scalerl.envs.math.verifier import MATH_SYSTEM_PROMPT, strip_thinking
from scalerl.envs.registry import UnknownTaskError, register_task_prefix
from scalerl.envs.task import Task

MATH_MODULES: tuple[str, ...] = ("arithmetic", "algebra", "geometry", "probability")
"""reasoning-gym subpackages whose generators count as math."""
MATH_VERIFY_DATASETS: frozenset[str] = frozenset({
    "basic_arithmetic", "chain_sum", "coin_flip", "count_bits", "decimal_chain_sum", "dice",
    "fraction_simplification", "gcd", "gsm_symbolic", "lcm", "leg_counting", "products",
    "simple_equations", "simple_geometry",
})
"""Datasets with plain numeric gold answers, scored by math-verify; the rest by reasoning-gym."""
TEST_SEED = 987_654_321
"""Seed of every rg test split; train seeds should differ (the hash check removes overlaps)."""
RG_TIMEOUT_S = 10.0

_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def math_datasets() -> list[str]:
    """Names of reasoning-gym's math generators (those in `MATH_MODULES`)."""
    from reasoning_gym.factory import DATASETS

    return sorted(
        name for name, (cls, _cfg) in DATASETS.items()
        if cls.__module__.split(".")[1] in MATH_MODULES
    )


def scorer_of(dataset: str) -> str:
    return "math-verify" if dataset in MATH_VERIFY_DATASETS else "reasoning-gym"


class ReasoningGymTask(Task):
    """One reasoning-gym math generator as a task with train and test splits."""

    kind = "math"

    def __init__(
        self, dataset: str, *, seed: int = 0, train_size: int = 500, test_size: int = 100,
        requires_thinking: bool = False,
    ) -> None:
        valid = math_datasets()
        if dataset not in valid:
            raise UnknownTaskError(
                f"unknown reasoning-gym math dataset {dataset!r}; valid: {', '.join(valid)}"
            )
        self.name = f"rg:{dataset}"
        self.dataset = dataset
        self.seed, self.train_size, self.test_size = seed, train_size, test_size
        self.requires_thinking = requires_thinking
        self.system_prompt = MATH_SYSTEM_PROMPT
        self.source = f"reasoning-gym {dataset} (seed {seed}; scored by {scorer_of(dataset)})"
        self._entries: dict[str, dict[str, Any]] = {}

    def _generate(self, size: int, seed: int) -> tuple[list[Sample], list[str]]:
        import reasoning_gym

        samples, keys = [], []
        for entry in reasoning_gym.create_dataset(self.dataset, size=size, seed=seed):
            key = prompt_key(entry["question"])
            sid = key[:16]
            self._entries[sid] = entry
            samples.append(Sample(
                id=sid, task=self.name, prompt=entry["question"], answer=str(entry["answer"]),
                meta={"dataset": self.dataset, "scorer": scorer_of(self.dataset)},
            ))
            keys.append(key)
        return samples, keys

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        train, train_keys = self._generate(self.train_size, self.seed)
        test, test_keys = self._generate(self.test_size, TEST_SEED)  # test entries win in _entries
        test_split = assign_splits(test_keys, test_fraction=1.0)  # dedup within test
        split = assign_splits(train_keys, test_fraction=0.0, heldout_keys=test_keys)
        return {
            "train": tuple(train[i] for i in split.train),
            "test": tuple(test[i] for i in test_split.test),
        }

    def judge(self, sample: Sample, completion: str, grading: Grading) -> Score:
        """math-verify (the `math` kind) for numeric datasets, else reasoning-gym's scorer."""
        if self.dataset in MATH_VERIFY_DATASETS:
            return super().judge(sample, completion, grading)
        return self._score_rg(sample, completion)

    def _score_rg(self, sample: Sample, completion: str) -> Score:
        self.samples("test")  # builds the entries once
        entry = self._entries.get(sample.id)
        if entry is None:
            return Score("error", f"{self.name} has no sample {sample.id!r}")
        answer_part = strip_thinking(completion, self.requires_thinking)
        boxed = last_boxed(answer_part) if answer_part is not None else None
        if not boxed:
            return Score("no_answer", "no \\boxed{} answer")
        outcome = _rg_pool().run(_rg_score, (self.dataset, boxed[:2000], entry), RG_TIMEOUT_S)
        if outcome.status == "ok":
            value = float(outcome.value)
            status = "correct" if value >= 1.0 - 1e-9 else "wrong"
            detail = f"reasoning-gym score {value:.3f} for {truncate(boxed, 80)!r}"
            return Score(status, detail, outcome.latency_s)
        detail = f"reasoning-gym scorer: {truncate(outcome.detail)}"
        return Score(outcome.status, detail, outcome.latency_s)


# --- the worker side: runs in the rg pool ------------------------------------------------------
_WORKER_DATASETS: dict[str, Any] = {}


def _rg_worker_init() -> None:
    import reasoning_gym  # noqa: F401 - warm the import before the first deadline starts


def _rg_score(dataset: str, answer: str, entry: dict[str, Any]) -> float:
    import reasoning_gym

    if dataset not in _WORKER_DATASETS:
        _WORKER_DATASETS[dataset] = reasoning_gym.create_dataset(dataset, size=1, seed=0)
    return float(_WORKER_DATASETS[dataset].score_answer(answer, entry))


def _rg_pool() -> Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = Pool(2, initializer=_rg_worker_init)
        return _POOL


@register_task_prefix("rg", description="reasoning-gym math generators (rg:basic_arithmetic, ...)")
def rg_task(dataset: str) -> ReasoningGymTask:
    return ReasoningGymTask(dataset)
