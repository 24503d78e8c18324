"""The built-in code benchmarks (MBPP, MBPP+, HumanEval+) and the DeepCoder training set.

MBPP (`full` config, test split) is prompted as in its paper (the problem, then "Your code should
pass these tests:" and its `test_list`) and graded by those asserts; MBPP+ and HumanEval+ by
EvalPlus's extra tests, made numpy-free (envs/bench/evalplus.py). DeepCoder's rows (the train
splits of its primeintellect, taco and lcbv5 configs) carry `tests` as a JSON string in the
APPS/TACO or LiveCodeBench layout, read by the `code` kind's reader (envs/code/files.py), with
the function name from `metadata` when a functional test lacks one and the time limit from
`metadata` when given. Every test runs in the sandbox (envs/code/verifier.py); nothing here runs
code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from scalerl.envs.base import Sample
from scalerl.envs.bench.evalplus import adapt_plus_test, asserts_check, entry_point
from scalerl.envs.bench.hub import HubSource
from scalerl.envs.bench.math_sets import text_of
from scalerl.envs.bench.task import Benchmark, register_benchmark
from scalerl.envs.code import verifier as _code_kind  # noqa: F401 - registers the `code` kind
from scalerl.envs.code.files import read_code_tests
from scalerl.envs.code.tasks import HUMANEVAL_PROMPT
from scalerl.envs.data import prompt_key

MBPP_PROMPT = "{text}\nYour code should pass these tests:\n\n{tests}\n"
"""MBPP's prompt (Austin et al. 2021): the problem, then its asserts."""
STDIN_FORMAT = ("Read the input from standard input, solve the problem and write the answer "
                "to standard output. Give the complete program in one ```python block.")
STARTER_FORMAT = ("Complete the following starter code and give the whole solution in one "
                  "```python block:\n\n```python\n{starter}\n```")
PLUS_OPTIONS = MappingProxyType({"test_timeout_s": 20.0})
"""EvalPlus runs hundreds of inputs in one `check`: one deadline for each candidate call."""
_SECONDS = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|milliseconds?|s|sec|seconds?)?\s*$", re.I)


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def listed(value: Any, column: str) -> list[str]:
    if isinstance(value, str):  # some copies store lists as JSON text
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"column {column!r} must be a list of strings")
    return value


def mbpp_row(row: Mapping[str, Any], task: str) -> Sample:
    text, code = text_of(row, "text", "prompt"), text_of(row, "code")
    asserts = listed(row.get("test_list"), "test_list")
    entry = entry_point(code, asserts)
    prompt = MBPP_PROMPT.format(text=text, tests="\n".join(asserts))
    setup = "\n".join(listed(row.get("test_imports") or [], "test_imports"))
    setup = "\n".join(filter(None, [setup, str(row.get("test_setup_code") or "")]))
    tests = {"type": "assert", "entry_point": entry, "test": asserts_check(asserts, entry),
             "prelude": setup}
    return Sample(id=str(row["task_id"]), task=task, prompt=prompt, tests=tests,
                  meta={"problem": text, "solution": fenced(code), "entry_point": entry})


def mbpp_plus_row(row: Mapping[str, Any], task: str) -> Sample:
    text, code = text_of(row, "prompt"), text_of(row, "code")
    asserts = listed(row.get("test_list"), "test_list")
    entry = entry_point(code, asserts)
    setup = "\n".join(listed(row.get("test_imports") or [], "test_imports"))
    prompt = MBPP_PROMPT.format(text=text, tests=asserts[0])
    tests = {"type": "assert", "entry_point": entry, "prelude": setup,
             "test": adapt_plus_test(text_of(row, "test"), entry)}
    return Sample(id=f"Mbpp/{row['task_id']}", task=task, prompt=prompt, tests=tests,
                  meta={"problem": text, "solution": fenced(code), "entry_point": entry})


def humaneval_plus_row(row: Mapping[str, Any], task: str) -> Sample:
    stub, entry = text_of(row, "prompt"), text_of(row, "entry_point")
    tests = {"type": "assert", "entry_point": entry, "prelude": stub,
             "test": adapt_plus_test(text_of(row, "test"), entry)}
    solution = fenced(stub + str(row.get("canonical_solution") or ""))
    return Sample(id=str(row["task_id"]), task=task, prompt=HUMANEVAL_PROMPT.format(prompt=stub),
                  tests=tests, meta={"problem": stub, "solution": solution})


def metadata_of(row: Mapping[str, Any]) -> dict[str, Any]:
    meta = row.get("metadata")
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    return dict(meta) if isinstance(meta, Mapping) else {}


def time_limit_s(meta: Mapping[str, Any]) -> float | None:
    """A problem's time limit in seconds from its metadata (`time_limit`: 2, "2 seconds",
    "1000 ms"), or None when it gives none."""
    value = meta.get("time_limit", meta.get("time_limit_s"))
    if isinstance(value, bool) or value in (None, ""):
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    match = _SECONDS.match(str(value))
    if not match:
        return None
    seconds = float(match.group(1)) / (1000.0 if (match.group(2) or "s").lower().startswith(
        "m") else 1.0)
    return seconds if seconds > 0 else None


def code_prompt(question: str, starter: str) -> str:
    fmt = STARTER_FORMAT.format(starter=starter.rstrip()) if starter.strip() else STDIN_FORMAT
    return f"{question.strip()}\n\n{fmt}"


def with_fn_name(tests: Any, meta: Mapping[str, Any]) -> Any:
    """Functional tests that do not name their function get the row metadata's `func_name`."""
    name = meta.get("func_name") or meta.get("fn_name")
    if name and isinstance(tests, list):
        return [dict(t, fn_name=t.get("fn_name") or name) if isinstance(t, dict) else t
                for t in tests]
    if name and isinstance(tests, dict) and "inputs" in tests and not tests.get("fn_name"):
        return dict(tests, fn_name=name)
    return tests


def bench_tests(raw: Any, meta: Mapping[str, Any], column: str,
                prelude: str | None = None) -> dict[str, Any]:
    """The verifier's tests of a benchmark row: `raw` as envs/code/files.py reads it, with the
    metadata's function name for functional tests that give none, `prelude` (code run before
    the candidate's) and the metadata's time limit."""
    tests = read_code_tests(with_fn_name(raw, meta), column)
    if prelude is not None:
        tests["prelude"] = prelude
    limit = time_limit_s(meta)
    if limit is not None:
        tests["timeout_s"] = limit
    return tests


def deepcoder_row(row: Mapping[str, Any], task: str) -> Sample:
    problem = text_of(row, "problem", "question")
    meta = metadata_of(row)
    raw = row.get("tests")
    tests = bench_tests(json.loads(raw) if isinstance(raw, str) else raw, meta, "tests")
    solutions = row.get("solutions") or []
    first = solutions[0] if solutions and isinstance(solutions[0], str) else None
    extra = {"solution": fenced(first)} if first else {}
    return Sample(id=prompt_key(problem)[:16], task=task,
                  prompt=code_prompt(problem, str(row.get("starter_code") or "")), tests=tests,
                  meta={"problem": problem, **extra})


MBPP = register_benchmark(Benchmark(
    name="mbpp", kind="code", size=500, to_sample=mbpp_row,
    source=HubSource("google-research-datasets/mbpp", (("full", "test"),),
                     revision="4bb6404fdc6cacfda99d4ac4205087b89d32030c"),
    grading="all `test_list` asserts pass in the sandbox"))
MBPP_PLUS = register_benchmark(Benchmark(
    name="mbpp+", kind="code", size=378, to_sample=mbpp_plus_row, options=PLUS_OPTIONS,
    source=HubSource("evalplus/mbppplus", ((None, "test"),),
                     revision="b2d74c91837c3f2a20c1299ae98133cbe7cfa077"),
    grading="EvalPlus base + extra tests (`test`) pass in the sandbox"))
HUMANEVAL_PLUS = register_benchmark(Benchmark(
    name="humaneval+", kind="code", size=164, to_sample=humaneval_plus_row, options=PLUS_OPTIONS,
    source=HubSource("evalplus/humanevalplus", ((None, "test"),),
                     revision="d32357cf319e50e9c8d8dab5ea876c72b0fd321b"),
    grading="EvalPlus `check(candidate)` (base + extra inputs) passes in the sandbox"))
DEEPCODER = register_benchmark(Benchmark(
    name="deepcoder", kind="code", size=24287, role="train", to_sample=deepcoder_row,
    source=HubSource("agentica-org/DeepCoder-Preview-Dataset",
                     (("primeintellect", "train"), ("taco", "train"), ("lcbv5", "train")),
                     revision="177913a7bd43791646ef6a43645caa3c871ab3db"),
    grading="every test (stdin/stdout or call) passes in the sandbox"))
