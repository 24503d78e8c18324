"""The built-in code benchmarks (MBPP, MBPP+, HumanEval+) and the DeepCoder training set.

MBPP (`full` config, test split) is prompted as in its paper (the problem, then "Your code should
pass these tests:" and its `test_list`) and graded by those asserts, its `test_setup_code` run
after the candidate's code as MBPP's harness runs it; MBPP+ and HumanEval+ by EvalPlus's extra
tests, made numpy-free and fixed to EvalPlus's evaluator (envs/bench/evalplus.py), with its time
limits: 4 s per input, 60 s per task. DeepCoder's rows (the train
splits of its primeintellect, taco and lcbv5 configs) carry `tests` as a JSON string in the
PrimeIntellect, APPS/TACO or LiveCodeBench layout, read by the `code` kind's reader
(envs/code/files.py), with the function name from `metadata` when a functional test lacks one;
each row is graded as DeepCoder's reward grades its config (rllm/rewards/code_reward.py): lcbv5
rows by LiveCodeBench's rules (6 s a test), taco and primeintellect rows by the TACO checker's
(12 s a test), every program after the reward's imports. A problem graded by function calls is
prompted to write that function. Each sample's tests record which are public, the examples its
prompt shows (envs/code/public.py): MBPP's asserts, MBPP+'s one assert, HumanEval+'s docstring
examples. Every test runs in the sandbox (envs/code/verifier.py);
nothing here runs code.
"""

from __future__ import annotations

import json
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
from scalerl.envs.code.public import (
    assert_tests,
    docstring_examples,
    prompt_asserts,
    with_public,
)
from scalerl.envs.code.tasks import HUMANEVAL_PROMPT
from scalerl.envs.data import prompt_key

MBPP_PROMPT = "{text}\nYour code should pass these tests:\n\n{tests}\n"
"""MBPP's prompt (Austin et al. 2021): the problem, then its asserts."""
STDIN_FORMAT = ("Read the input from standard input, solve the problem and write the answer "
                "to standard output. Give the complete program in one ```python block.")
STARTER_FORMAT = ("Complete the following starter code and give the whole solution in one "
                  "```python block:\n\n```python\n{starter}\n```")
CALL_FORMAT = ("Write a Python function `{fn_name}` that solves the problem: it is called with "
               "each test's arguments and must return the answer (it does not read standard "
               "input). Give it, with its imports, in one ```python block.")
DEEPCODER_IMPORTS = (
    "from itertools import accumulate, chain, combinations, count, permutations, product, "
    "groupby, islice, repeat, zip_longest, cycle, pairwise\n"
    "from copy import deepcopy\nfrom string import ascii_lowercase, ascii_uppercase\n"
    "from math import floor, log2, log10, sqrt, comb, gcd, ceil, inf, isqrt, factorial, atan2, "
    "pi, log, prod\n"
    "from collections import defaultdict, deque, Counter, OrderedDict\n"
    "from bisect import bisect, bisect_left, bisect_right, insort\n"
    "from heapq import heappush, heappop, heapify, merge, nlargest, nsmallest, heapreplace\n"
    "from functools import reduce, cache, lru_cache, cmp_to_key, partial\n"
    "from random import randrange, shuffle\nfrom operator import itemgetter, sub, xor, or_, iand\n"
    "from re import search as re_search\nfrom os.path import commonprefix\n"
    "from typing import List, Tuple, Dict, Set, Optional, Union, Any, Callable, Iterable, "
    "Iterator, Generator, Deque\n"
    "import copy, string, math, collections, bisect, heapq, functools, random, itertools, "
    "operator, re, datetime, sys, io, os\nfrom time import time\n")
"""What DeepCoder's reward puts before every program (rllm's `BASE_IMPORTS`), less numpy and
pandas, which the sandbox's Python does not have."""
DEEPCODER_TIMEOUT_S = MappingProxyType({"taco": 12.0, "lcb": 6.0})
"""Seconds per test by comparison rule: the reward's TACO runs (`timeout_per_test=12`) and its
LiveCodeBench runs (`timeout=6`)."""
EVALPLUS_LIMITS = MappingProxyType({"timeout_s": 4.0, "run_timeout_s": 60.0})
"""EvalPlus's limits: each input max(4 s, 4 x the canonical solution's time), a task at most 60 s.
The hub rows carry no ground-truth times; 4 s is EvalPlus's limit for every input whose canonical
solution takes under 1 s (docs/benchmarks.md)."""


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
    imports = "\n".join(listed(row.get("test_imports") or [], "test_imports"))
    tests = {"type": "assert", "entry_point": entry, "test": asserts_check(asserts, entry),
             "prelude": imports, "setup": str(row.get("test_setup_code") or "")}
    tests = with_public(tests, tests)  # the prompt lists every assert: all are public
    return Sample(id=str(row["task_id"]), task=task, prompt=prompt, tests=tests,
                  meta={"problem": text, "solution": fenced(code), "entry_point": entry})


def mbpp_plus_row(row: Mapping[str, Any], task: str) -> Sample:
    text, code = text_of(row, "prompt"), text_of(row, "code")
    asserts = listed(row.get("test_list"), "test_list")
    entry = entry_point(code, asserts)
    setup = "\n".join(listed(row.get("test_imports") or [], "test_imports"))
    prompt = MBPP_PROMPT.format(text=text, tests=asserts[0])
    tests = {"type": "assert", "entry_point": entry, "prelude": setup,
             "test": adapt_plus_test(text_of(row, "test"), entry), **EVALPLUS_LIMITS}
    tests = with_public(tests, assert_tests(  # the one assert the prompt shows, if any
        prompt_asserts(asserts, 1), entry, prelude=setup, timeout_s=EVALPLUS_LIMITS["timeout_s"]))
    return Sample(id=f"Mbpp/{row['task_id']}", task=task, prompt=prompt, tests=tests,
                  meta={"problem": text, "solution": fenced(code), "entry_point": entry})


def humaneval_plus_row(row: Mapping[str, Any], task: str) -> Sample:
    stub, entry = text_of(row, "prompt"), text_of(row, "entry_point")
    tests = {"type": "assert", "entry_point": entry, "prelude": stub,
             "test": adapt_plus_test(text_of(row, "test"), entry), **EVALPLUS_LIMITS}
    tests = with_public(tests, assert_tests(  # the docstring's examples
        docstring_examples(stub, entry), entry, prelude=stub,
        timeout_s=EVALPLUS_LIMITS["timeout_s"]))
    solution = fenced(stub + str(row.get("canonical_solution") or ""))
    return Sample(id=str(row["task_id"]), task=task, prompt=HUMANEVAL_PROMPT.format(prompt=stub),
                  tests=tests, meta={"problem": stub, "solution": solution})


def metadata_of(row: Mapping[str, Any]) -> dict[str, Any]:
    meta = row.get("metadata")
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    return dict(meta) if isinstance(meta, Mapping) else {}


def code_prompt(question: str, starter: str, tests: Mapping[str, Any] | None = None) -> str:
    """The problem, then what to write: complete the starter code when there is one, else the
    function the call tests call, else a program reading standard input."""
    if starter.strip():
        fmt = STARTER_FORMAT.format(starter=starter.rstrip())
    elif tests is not None and tests.get("type") == "call":
        fmt = CALL_FORMAT.format(fn_name=tests["fn_name"])
    else:
        fmt = STDIN_FORMAT
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


def bench_tests(raw: Any, meta: Mapping[str, Any], column: str, *, prelude: str | None = None,
                compare: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """The verifier's tests of a benchmark row: `raw` as envs/code/files.py reads it, with the
    metadata's function name for functional tests that give none, `prelude` (code run before
    the candidate's), the comparison rule `compare` and the per-test time limit `timeout_s`
    (None: the task's)."""
    tests = read_code_tests(with_fn_name(raw, meta), column)
    if prelude is not None:
        tests["prelude"] = prelude
    if compare is not None:
        tests["compare"] = compare
    if timeout_s is not None:
        tests["timeout_s"] = timeout_s
    return tests


def deepcoder_compare(raw: Any) -> str:
    """The rule DeepCoder's reward grades a row by, told by its tests' layout: lcbv5 rows (tests
    with a LiveCodeBench `testtype`) by LiveCodeBench's, taco rows (an {inputs, outputs} dict)
    and primeintellect rows (tests with a `type`) by the TACO checker's."""
    lcb = isinstance(raw, list) and bool(raw) and all(
        isinstance(t, dict) and "testtype" in t for t in raw)
    return "lcb" if lcb else "taco"


def as_fenced(solution: str) -> str:
    """A reference solution as one fenced block (PrimeIntellect's already are)."""
    text = solution.strip()
    return text if text.startswith("```") else fenced(text)


def deepcoder_row(row: Mapping[str, Any], task: str) -> Sample:
    problem = text_of(row, "problem", "question")
    meta = metadata_of(row)
    raw = row.get("tests")
    raw = json.loads(raw) if isinstance(raw, str) else raw
    compare = deepcoder_compare(raw)
    tests = bench_tests(raw, meta, "tests", prelude=DEEPCODER_IMPORTS, compare=compare,
                        timeout_s=DEEPCODER_TIMEOUT_S[compare])
    solutions = row.get("solutions") or []
    if isinstance(solutions, str):  # some copies store the list as JSON text
        solutions = json.loads(solutions)
    first = solutions[0] if solutions and isinstance(solutions[0], str) else None
    extra = {"solution": as_fenced(first)} if first else {}
    return Sample(id=prompt_key(problem)[:16], task=task,
                  prompt=code_prompt(problem, str(row.get("starter_code") or ""), tests),
                  tests=tests, meta={"problem": problem, "compare": compare, **extra})


MBPP = register_benchmark(Benchmark(
    name="mbpp", kind="code", size=500, to_sample=mbpp_row,
    source=HubSource("google-research-datasets/mbpp", (("full", "test"),),
                     revision="4bb6404fdc6cacfda99d4ac4205087b89d32030c"),
    grading="all `test_list` asserts pass in the sandbox (`test_setup_code` after the code)"))
MBPP_PLUS = register_benchmark(Benchmark(
    name="mbpp+", kind="code", size=378, to_sample=mbpp_plus_row,
    source=HubSource("evalplus/mbppplus", ((None, "test"),),
                     revision="b2d74c91837c3f2a20c1299ae98133cbe7cfa077"),
    grading="EvalPlus's `test` (base + plus inputs) passes as its evaluator judges, 4 s/input"))
HUMANEVAL_PLUS = register_benchmark(Benchmark(
    name="humaneval+", kind="code", size=164, to_sample=humaneval_plus_row,
    source=HubSource("evalplus/humanevalplus", ((None, "test"),),
                     revision="d32357cf319e50e9c8d8dab5ea876c72b0fd321b"),
    grading="EvalPlus's `check(candidate)` passes as its evaluator judges, 4 s/input"))
DEEPCODER = register_benchmark(Benchmark(
    name="deepcoder", kind="code", size=24287, role="train", to_sample=deepcoder_row,
    source=HubSource("agentica-org/DeepCoder-Preview-Dataset",
                     (("primeintellect", "train"), ("taco", "train"), ("lcbv5", "train")),
                     revision="177913a7bd43791646ef6a43645caa3c871ab3db"),
    grading="every test passes in the sandbox: lcbv5 rows as LiveCodeBench compares, taco and "
            "primeintellect rows as DeepCoder's TACO checker does (without its false positives)"))
