"""The code verifier: extract the program, run it with ALL its tests in one sandbox run, compare
here. Formats: `stdio`, `call`, `assert` (HumanEval; literal asserts become call tests, the rest
run in the two-process `check` mode of envs/code/harness.py). A comparison rule (`compare`:
`tokens`, LiveCodeBench's `lcb`, DeepCoder's `taco`; envs/code/rules.py) decides equality and
the run's limits. Expected values never enter the sandbox, except a non-literal `check` source,
which stays in a trusted non-dumpable process.
Covered: exit-code tricks, BaseExceptions, always-equal objects, builtin subclasses, NaN, patched
builtins, frame walks, forged or repeated result lines, planted modules. Not covered: programs
that special-case the test inputs, and wall-clock deadlines that a loaded machine can trip.
"""

from __future__ import annotations

import json
import marshal
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from scalerl.envs.base import Score, truncate
from scalerl.envs.code.files import CODE_COLUMNS, read_code_tests
from scalerl.envs.code.plan import Plan, TestFormatError, plan_tests
from scalerl.envs.code.rules import Rule, get_rule
from scalerl.envs.grading import DEFAULT_GRADING, Grading, cluster_grader
from scalerl.envs.kinds import Kind, register_kind
from scalerl.sandbox.base import ExecResult, Limits
from scalerl.sandbox.config import SandboxConfig

CODE_SYSTEM_PROMPT = (
    "Write a Python 3 solution. Think first if you like, then give the complete program in one "
    "```python fenced block. Read from standard input and print to standard output, unless the "
    "task names a function to write."
)
DEFAULT_TEST_TIMEOUT_S = 4.0
HARNESS = Path(__file__).with_name("harness.py")
"""The in-sandbox harness, read as a file and run as `harness.py` beside the candidate."""
CODEC = Path(__file__).with_name("codec.py")
"""The value codec, shipped beside the harness (which loads it from its file)."""
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def extract_code(completion: str, requires_thinking: bool = False) -> str | None:
    """The last fenced block after the thinking part; else the answer text itself; else None.

    The answer part is what follows the last `</think>`; None when `requires_thinking` and there
    is none, or a `<think>` was opened and never closed. An unclosed last fence (the generation
    stopped) yields what follows it.
    """
    end = completion.rfind(_THINK_CLOSE)
    if end >= 0:
        answer = completion[end + len(_THINK_CLOSE):]
    elif requires_thinking or _THINK_OPEN in completion:
        return None
    else:
        answer = completion
    blocks = _FENCE.findall(answer)
    code = blocks[-1] if blocks else answer
    return code if code.strip() else None


@dataclass(frozen=True)
class TestResult:
    """One test's verdict: `kind` is pass | wrong | timeout | error (the test itself is bad)."""

    __test__ = False  # not a pytest class

    index: int
    kind: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.kind == "pass"



# --- running: one sandbox run per program, records framed by a per-run nonce ------------------
def _backend(sandbox: SandboxConfig) -> Any:
    """The shared Backend instance of the run's sandbox settings (backend None: bwrap, else
    docker)."""
    from scalerl.sandbox import get_backend

    return get_backend(sandbox.backend, sandbox.workers)


def code_runner(grading: Grading) -> Any:
    """What runs the run's programs: its cluster's backend when `verifiers.cluster` is ray
    (envs/ray_remote.py: the same backend on a grading actor), else None (this machine's shared
    backend of `grading.sandbox`)."""
    remote = cluster_grader(grading)
    return remote.backend(grading.sandbox) if remote is not None else None


def default_limits(n_tests: int, test_timeout_s: float, sandbox: SandboxConfig, *,
                   rule: Rule | None = None, data_bytes: int = 0,
                   expected_bytes: int = 0, budget_s: float | None = None) -> Limits:
    """The whole run's limits. Wall and CPU: the rule's own global limit when it has one (e.g.
    LiveCodeBench's (timeout + 1) * tests + 5 s), else start-up plus every test's deadline (or the
    plan's own `budget_s`, e.g. EvalPlus's 60 s a task) capped at the sandbox settings'
    `max_run_s`. Memory: the settings' `memory_mb` for the program, plus
    room for the test data the harness holds (`data_bytes`: one test's input, read and written as
    the program's stdin file), rounded up to a power of two MiB so warm workers are shared.
    Output: room for every expected result besides the usual 16 MiB."""
    if rule is not None and rule.run_wall_s is not None:
        wall = rule.run_wall_s(n_tests, test_timeout_s)
    else:
        wall = min(sandbox.max_run_s, 3.0 + (n_tests * test_timeout_s if budget_s is None
                                             else budget_s))
    return Limits(wall_s=wall, cpu_s=wall, memory_mb=sandbox.memory_mb + data_mb(data_bytes),
                  output_bytes=(16 << 20) + 2 * expected_bytes)


def data_mb(data_bytes: int) -> int:
    """MiB of memory for `data_bytes` of test data in the sandbox: 0 under 1 MiB, else the next
    power of two MiB."""
    if data_bytes < 1 << 20:
        return 0
    return 1 << max(0, (data_bytes - 1).bit_length() - 20)


def parse_records(stdout: bytes, nonce: str, n_tests: int) -> tuple[dict[int, dict], set[int]]:
    """Well-formed `<nonce> <json>` records by test index, and the indices seen more than once."""
    prefix = (nonce + " ").encode()
    records: dict[int, dict] = {}
    repeated: set[int] = set()
    for line in stdout.split(b"\n"):
        if not line.startswith(prefix):
            continue
        try:
            rec = json.loads(line[len(prefix):], parse_constant=_no_constant)
        except (ValueError, RecursionError):
            continue
        i = rec.get("i") if isinstance(rec, dict) else None
        if type(i) is not int or not 0 <= i < n_tests:
            continue
        if i in records:
            repeated.add(i)
        records[i] = rec
    return records, repeated


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not strict JSON")


def judge_run(plan: Plan, res: ExecResult, nonce: str) -> list[TestResult]:
    """Every test's verdict: exactly one well-formed record each, judged by the plan."""
    records, repeated = parse_records(res.stdout, nonce, plan.n_tests)
    return judge_records(plan, res, records, repeated)


def judge_records(plan: Plan, res: ExecResult, records: Mapping[int, dict],
                  repeated: set[int]) -> list[TestResult]:
    """`judge_run` on records already parsed (`parse_records`)."""
    out = []
    for i in range(plan.n_tests):
        if i in repeated:
            out.append(TestResult(i, "wrong", "several results for one test"))
        elif i not in records:
            out.append(TestResult(i, *_missing(res)))
        else:
            out.append(TestResult(i, *plan.judge(i, records[i])))
    return out


def _missing(res: ExecResult) -> tuple[str, str]:
    if res.status == "timeout":
        return "timeout", f"no result: the run passed its {res.detail or 'wall-time'} limit"
    how = f"signal {res.signal}" if res.signal is not None else f"exit code {res.exit_code}"
    tail = res.stderr[-300:].decode("utf-8", "replace")
    return "wrong", f"no result: the program ended ({res.status}, {how}): {tail}"


def verdict(results: list[TestResult], latency_s: float, partial_credit: bool = False) -> Score:
    """`correct` only when every test passed; `error` when a test itself is broken; `timeout` when
    only deadlines failed; else wrong. With `partial_credit`, the verdict is graded: its credit
    (`Score.reward`) is the fraction of tests passed (an `error` has none: never trained)."""
    failed = [r for r in results if not r.passed]
    n = len(results)
    credit = (n - len(failed)) / n if partial_credit and n else None
    if not failed:
        return Score("correct", f"{n}/{n} tests passed", latency_s, reward=credit)
    if any(r.kind == "error" for r in failed):
        failed = [r for r in failed if r.kind == "error"]
        status, credit = "error", None
    else:
        status = "timeout" if all(r.kind == "timeout" for r in failed) else "wrong"
    first = failed[0]
    detail = f"{n - len([r for r in results if not r.passed])}/{n} tests passed; test " \
             f"{first.index}: {first.detail}"
    return Score(status, truncate(detail, 500), latency_s, reward=credit)


def score_code(
    completion: str,
    tests: Mapping[str, Any],
    *,
    requires_thinking: bool = False,
    sandbox: SandboxConfig = DEFAULT_GRADING.sandbox,
    limits: Limits | None = None,
    float_outputs: bool = False,
    float_tol: float = 1e-6,
    test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
    compare: str = "tokens",
    partial_credit: bool = False,
    runner: Any = None,
) -> Score:
    """Verdict on one completion against its tests, from one sandbox run. Never raises.

    `correct` only when every test has exactly one well-formed result equal to the expected one;
    `timeout` when the only failures are deadlines (per test, or the whole run); `no_answer`
    without code; `error` for malformed tests or a sandbox failure; `wrong` otherwise. The detail
    names the first failing test and why. The program runs in the backend `sandbox` names (the
    run's settings); `limits` overrides the whole run's limits (default: `default_limits`);
    `test_timeout_s` is each test's deadline; `compare` names the comparison rule (a test JSON's
    own `"compare"` wins); `partial_credit` grades the verdict by the fraction of tests passed
    (`Score.reward`; no code: credit 0); `runner` runs the program instead of this machine's
    backend (`code_runner`: a Ray cluster's).
    """
    start = time.monotonic()
    code = extract_code(completion, requires_thinking)
    if code is None:
        return Score("no_answer", "no code found in the completion",
                     reward=0.0 if partial_credit else None)
    try:
        run = run_tests(code, tests, sandbox=sandbox, limits=limits, float_outputs=float_outputs,
                        float_tol=float_tol, test_timeout_s=test_timeout_s, compare=compare,
                        runner=runner)
    except TestFormatError as e:
        return Score("error", f"tests: {e}")
    except SandboxFailure as e:  # a broken sandbox is the verifier's failure: `error`, never wrong
        return Score("error", truncate(str(e)), time.monotonic() - start)
    return verdict(list(run.results), time.monotonic() - start, partial_credit)


class SandboxFailure(RuntimeError):
    """The sandbox itself failed (could not run the program, or said `sandbox_error`): the
    verifier's failure, never the candidate's."""


@dataclass(frozen=True)
class TestRun:
    """One sandbox run of a program on a test spec: each test's verdict, and the harness's
    well-formed record of each test it reported (what the program printed or returned)."""

    __test__ = False  # not a pytest class

    plan: Plan
    results: tuple[TestResult, ...]
    records: Mapping[int, dict]
    latency_s: float


def run_tests(code: str, tests: Mapping[str, Any], *,
              sandbox: SandboxConfig = DEFAULT_GRADING.sandbox, limits: Limits | None = None,
              float_outputs: bool = False, float_tol: float = 1e-6,
              test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S, compare: str = "tokens",
              runner: Any = None) -> TestRun:
    """Run `code` (already extracted) on every test of `tests` in one sandbox run, as
    `score_code` does (`runner`: what runs it, None: this machine's backend of `sandbox`).
    Raises TestFormatError for malformed tests and SandboxFailure when the sandbox itself
    fails."""
    start = time.monotonic()
    plan, code = _plan(tests, code, float_outputs, float_tol, test_timeout_s, compare)
    nonce = secrets.token_hex(16)
    # trusted direction: parent -> harness; the spec, then the tests' inputs one frame each
    stdin = marshal.dumps(dict(plan.spec, nonce=nonce)) + plan.frames
    files = {"harness.py": _harness_source(HARNESS), "codec.py": _harness_source(CODEC),
             "prog.py": code.encode("utf-8", "replace")}
    run_limits = limits or default_limits(
        plan.n_tests, plan.spec["timeout_s"], sandbox, rule=plan.rule,
        data_bytes=2 * plan.largest_input, expected_bytes=plan.expected_bytes,
        budget_s=plan.budget_s)
    try:
        res = (runner or _backend(sandbox)).run(["python", "harness.py"], stdin=stdin, files=files,
                                    limits=run_limits)
    except Exception as e:
        raise SandboxFailure(f"sandbox: {type(e).__name__}: {e}") from e
    if res.status == "sandbox_error":
        raise SandboxFailure(f"sandbox error: {res.detail}")
    records, repeated = parse_records(res.stdout, nonce, plan.n_tests)
    results = judge_records(plan, res, records, repeated)
    return TestRun(plan, tuple(results), records, time.monotonic() - start)


def _plan(tests: Any, code: str, float_outputs: bool, float_tol: float,
          test_timeout_s: float, compare: str) -> tuple[Plan, str]:
    """The plan of `tests` and the program to run. A problem's own `timeout_s` (e.g. its
    statement's time limit) overrides the task's `test_timeout_s`, a `float_outputs` flag turns
    on float comparison, and a stdio problem's `prelude` (e.g. LiveCodeBench's imports) is put
    before the program, as call tests put it before the candidate's module."""
    own = tests if isinstance(tests, Mapping) else {}
    floats = float_outputs or bool(own.get("float_outputs"))
    timeout = own.get("timeout_s", test_timeout_s)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise TestFormatError(f"timeout_s must be a number > 0, got {timeout!r}")
    plan = plan_tests(tests, timeout_s=float(timeout), float_tol=float_tol if floats else None,
                      compare=compare)
    if plan.spec["mode"] == "stdio" and own.get("prelude"):
        code = f"{own['prelude']}\n{code}"
    return plan, code


@lru_cache(maxsize=2)
def _harness_source(path: Path) -> bytes:
    return path.read_bytes()


CODE_OPTIONS: tuple[str, ...] = ("requires_thinking", "limits", "float_outputs", "float_tol",
                                 "test_timeout_s", "compare", "partial_credit")
"""Options a task of the `code` kind may set (task spec `options:`; `partial_credit: true` grades
each verdict by the fraction of tests passed). The sandbox backend is the run's
`sandbox.backend`, never a task's."""


def _score_sample(sample: Any, completion: str, options: Mapping[str, Any],
                  grading: Grading = DEFAULT_GRADING) -> Score:
    if sample.tests is None:
        return Score("error", f"sample {sample.id!r} has no tests")
    if isinstance(options.get("limits"), Mapping):  # from a YAML/JSON task spec
        options = {**options, "limits": Limits(**options["limits"])}
    return score_code(completion, sample.tests, **options, sandbox=grading.sandbox,
                      runner=code_runner(grading))


def _preflight(options: Mapping[str, Any], grading: Grading = DEFAULT_GRADING) -> str | None:
    """A known comparison rule, and the sandbox backend the run's settings name must work
    here."""
    from scalerl.sandbox import backend_problem

    if "compare" in options:
        try:
            get_rule(options["compare"])
        except ValueError as e:
            return f"code option compare: {e}"
    remote = cluster_grader(grading)
    if remote is not None:  # every node of the cluster must be able to run it
        return remote.sandbox_problem(grading.sandbox.backend)
    return backend_problem(grading.sandbox.backend)


register_kind(Kind(
    name="code", score=_score_sample, gold_field="tests", system_prompt=CODE_SYSTEM_PROMPT,
    gold_columns=CODE_COLUMNS, read_gold=read_code_tests, preflight=_preflight,
    options=CODE_OPTIONS, option_hint="the sandbox is the run's sandbox.backend"))
