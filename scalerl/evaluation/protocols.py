"""Evaluation protocols: the sampling settings and prompts the field's reports use, by name.

`r1` is DeepSeek-R1's published usage (and most reasoning-model cards'): temperature 0.6, top-p
0.95, up to 32,768 generated tokens, 64 samples per problem on every benchmark, pass@1 as the
mean over samples with its standard error, and its prompt: no system prompt, the instruction in
the user turn (scalerl/evaluation/prompts.py). `lcb` is LiveCodeBench's runner: its official chat
prompt, temperature 0.2, top-p 0.95, 10 samples, 2,000 tokens, pass@1 and pass@5. `greedy` is
one sample at temperature 0 (older reports, EvalPlus's pass@1). `default` is what a bare `scalerl
eval --model` did before protocols (n = 8 at temperature 1). `run` (the default for a run
directory) is built from the run's own config by `run_protocol`: its validation n, ks and
temperature and its per-task budgets. `greedy`, `default` and `run` keep each task's own prompt.
A protocol may give tasks their own n and thinking/answer budgets; flags given on the command
line override it, and results.json records what was used. No generation here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scalerl.envs.registry import family
from scalerl.evaluation.prompts import TASK_STYLE, prompt_style
from scalerl.rollout.types import Budget

R1_MAX_TOKENS = 32768
"""DeepSeek-R1's generation length for its benchmark evaluations."""


@dataclass(frozen=True)
class Protocol:
    """How a benchmark is sampled and summarised."""

    name: str
    """Key in PROTOCOLS (`--protocol NAME`)."""
    description: str
    """One line for `--help` and the report header."""
    temperature: float
    top_p: float = 1.0
    """Nucleus sampling mass (1: the whole distribution, as the trainer samples)."""
    n: int = 1
    """Samples per problem for a task not in `n_for`."""
    n_for: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Samples per problem by task (or family) name, over `n`."""
    budget: Budget = field(default_factory=lambda: Budget(answer=R1_MAX_TOKENS))
    """Length budget for a task not in `budgets`."""
    budgets: Mapping[str, Budget] = field(default_factory=lambda: MappingProxyType({}))
    """Per-task thinking/answer budgets (forced interruption at the thinking budget)."""
    ks: tuple[int, ...] = (1,)
    """pass@k reported unless `--k` says otherwise."""
    prompt: str = TASK_STYLE
    """How samples are put to the model: a style of PROMPT_STYLES (`task`: each task's own)."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"protocol {self.name}: need temperature >= 0 and 0 < top_p <= 1, "
                             f"got {self.temperature}, {self.top_p}")
        counts = [self.n, *self.n_for.values()]
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
            raise ValueError(f"protocol {self.name}: every n must be an integer >= 1")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"protocol {self.name}: ks must be integers >= 1")
        prompt_style(self.prompt)  # an unknown style is a ValueError naming the styles

    def n_of(self, task: str) -> int:
        return _by_task(self.n_for, task, self.n)

    def budget_of(self, task: str) -> Budget:
        return _by_task(self.budgets, task, self.budget)


def _by_task(table: Mapping, task: str, default):
    if task in table:
        return table[task]
    return table.get(family(task), default)


R1 = Protocol(
    name="r1", description="DeepSeek-R1: no system prompt, the instruction in the user turn, "
    "T=0.6, top-p 0.95, 32k tokens, n=64, pass@1 = mean over samples (± s.e.)", temperature=0.6,
    top_p=0.95, n=64, prompt="r1")
LCB_MAX_TOKENS = 2000
"""LiveCodeBench's runner's default generation length (`--max_tokens`)."""
LCB = Protocol(
    name="lcb", description="LiveCodeBench's runner: its official prompt, T=0.2, top-p 0.95, "
    "n=10, 2,000 tokens, pass@1 and pass@5", temperature=0.2, top_p=0.95, n=10,
    budget=Budget(answer=LCB_MAX_TOKENS), ks=(1, 5), prompt="lcb")
GREEDY = Protocol(name="greedy", description="greedy: one sample at T=0, 32k tokens",
                  temperature=0.0, n=1)
DEFAULT = Protocol(name="default", description="scalerl's bare-model default: n=8 at T=1, 512 "
                   "answer tokens", temperature=1.0, n=8, budget=Budget(thinking=None, answer=512),
                   ks=(1, 4, 8))
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (R1, LCB, GREEDY, DEFAULT)}
"""Named protocols; `run` is made per run directory (`run_protocol`)."""
RUN = "run"


def run_protocol(cfg) -> Protocol:
    """A training run's own validation settings as a protocol (`cfg`: its RunConfig)."""
    temperature = cfg.val.temperature if cfg.val.temperature is not None else (
        cfg.policy.temperature)
    return Protocol(name=RUN, description="the run's own validation settings (config.yaml)",
                    temperature=temperature, n=cfg.val.n, ks=tuple(cfg.val.ks),
                    budget=Budget(thinking=None, answer=512),
                    budgets=MappingProxyType({t.name: t.budget for t in cfg.tasks}))


def protocol_names() -> list[str]:
    return [*PROTOCOLS, RUN]
