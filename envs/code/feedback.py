"""`tests_feedback`: code repair from test feedback, a code task's multi-turn environment.

After each assistant turn the program is extracted as the `code` verifier extracts it (the last
fenced block after the thinking, envs/code/verifier.py `extract_code`, with the task's
`requires_thinking`) and run on the sample's PUBLIC tests only (envs/code/public.py says which
they are), in one sandbox run through the verifier's own path (`run_tests`: same harness, same
comparison rule, same limits and task options). The reply is:
- done, when no program was found (the judge then says `no_answer`), when the sample has no
  public tests (nothing runs: the episode ends after the first answer), or when every public
  test passes (the private tests then judge, through the task's normal judge on the final
  transcript);
- else one `user` message naming each failing public test (its input, the expected output and
  what the program gave, or its error or timeout), each shown value cut to `max_shown_chars`,
  the whole cut to `max_observation_chars` (the cut is said), and asking for a corrected
  complete solution.
Private tests never run here, so nothing of them (input, output, count) can reach the message.

Failures: a sandbox that cannot run the program, and a sample whose `public` tests are malformed,
raise `SessionFailed` (the rollout's verdict becomes `error`, excluded from training and counted,
as a verifier error is): feedback is the verifier's work, so its failure is the verifier's.

Settings: `EnvContext.grading` is the run's `Grading` (envs/grading.py: the sandbox
backend, workers and caps every verdict uses). The task's verifier options (`requires_thinking`,
`test_timeout_s`, `compare`, `limits`, ...: what the judge runs with) are given at construction
(`verifier_options=`; `with_feedback` passes the task's); without them, `start` fails naming the
fix (a guess would run LiveCodeBench's tests under another comparison rule).

Turning it on: by name, `feedback:<task>` (`feedback:livecodebench:2024-08..2025-02`,
`feedback:mbpp`, `feedback:mbpp+`, `feedback:humaneval`, `feedback:humaneval+`, a user's code
task), up to 3 answers; in Python, `with_feedback(task, max_turns=3)`. Either gives a
`FeedbackTask`: the task under its own name (so its family's prompts, protocols and grading
stay), its samples and judge, with `environment` set; `--data feedback:<task>=PATH` gives it a
local copy. A task spec's `feedback: tests` builds the environment by its registered name
(`environment_factory("tests_feedback")`); it then needs the task's verifier options (above).
Not here: the turn loop, tokens and budgets (rollout/), how the final verdict is reached (the
task's judge).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.envs.base import Message, Sample, truncate
from scalerl.envs.code.asserts import bound_names, convert_check
from scalerl.envs.code.plan import TestFormatError, untag
from scalerl.envs.code.public import public_tests
from scalerl.envs.code.verifier import (
    SandboxFailure,
    TestRun,
    code_runner,
    extract_code,
    run_tests,
)
from scalerl.envs.environment import (
    EnvContext,
    Environment,
    Reply,
    SessionFailed,
    register_environment,
)
from scalerl.envs.grading import Grading
from scalerl.envs.played import PlayedTask
from scalerl.envs.registry import lookup_task, register_task_prefix
from scalerl.envs.task import Task
from scalerl.sandbox.base import Limits

RUN_OPTIONS = ("limits", "float_outputs", "float_tol", "test_timeout_s", "compare")
"""The task's verifier options that shape a test run (the `code` kind's, less
`requires_thinking`, which shapes extraction)."""
ASK = ("Fix the program so that it passes these tests and the problem's other cases, and reply "
       "with the complete corrected solution in one ```python block.")
CUT = "\n[... feedback cut to {n} characters]\n"


@dataclass(frozen=True)
class Failure:
    """One failing public test, as shown to the model."""

    index: int
    kind: str
    """wrong | timeout | error (the harness's verdict kind)."""
    test: str
    """What was run: the input (stdio, call) or the assert statement."""
    label: str
    """`Input` or `Test` (an assert)."""
    expected: str | None
    got: str


@register_environment("tests_feedback")
class TestsFeedback(Environment):
    """Public tests run after each answer; failures are the next user turn (module docstring)."""

    __test__ = False  # not a pytest class
    name = "tests_feedback"

    def __init__(self, *, max_turns: int = 3, max_observation_chars: int = 2000,
                 max_shown_chars: int = 300, max_failures: int = 3,
                 verifier_options: Mapping[str, Any] | None = None) -> None:
        for key, value, low in (("max_turns", max_turns, 1),
                                ("max_observation_chars", max_observation_chars, 64),
                                ("max_shown_chars", max_shown_chars, 20),
                                ("max_failures", max_failures, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"tests_feedback: {key} must be an integer >= {low}, "
                                 f"got {value!r}")
        self.max_turns, self.max_observation_chars = max_turns, max_observation_chars
        self.max_shown_chars, self.max_failures = max_shown_chars, max_failures
        self.verifier_options = dict(verifier_options) if verifier_options is not None else None

    def start(self, sample: Sample, context: EnvContext) -> dict[str, Any]:
        grading = context.grading
        if not isinstance(grading, Grading):
            raise TypeError(f"tests_feedback: EnvContext.grading must be a Grading "
                            f"(envs/grading.py), got {type(grading).__name__}")
        if self.verifier_options is None:
            raise ValueError(
                f"tests_feedback (task {sample.task!r}): the task's verifier options are "
                "unknown; build the environment with with_feedback(task) or "
                "TestsFeedback(verifier_options=task.verifier_options())")
        return {"grading": grading, "options": None, "public_runs": []}

    def step(self, sample: Sample, transcript: Sequence[Message], state: Any) -> Reply:
        if not transcript or transcript[-1].get("role") != "assistant":
            raise ValueError("tests_feedback: step() needs a transcript ending in an assistant "
                             "turn")
        options = self.options_for(state)
        code = extract_code(str(transcript[-1].get("content") or ""),
                            bool(options.get("requires_thinking", False)))
        try:
            public = public_tests(sample.tests)
        except TestFormatError as e:
            raise SessionFailed(f"tests_feedback: sample {sample.id!r}: {e}") from e
        if code is None or public is None:
            return Reply(done=True)
        run = self._run(sample, code, public, options, state["grading"])
        failed = [r for r in run.results if not r.passed]
        state["public_runs"].append((len(run.results) - len(failed), len(run.results)))
        if not failed:
            return Reply(done=True)
        shown = [failure(public, run, r.index) for r in failed[:self.max_failures]]
        whole = run.plan.spec["mode"] == "check"  # one run of the check, to its first failure
        text = self.render(shown, len(failed), None if whole else len(run.results))
        return Reply(done=False, messages=({"role": "user", "content": text},))

    def options_for(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """The task's verifier options: the ones given at construction, else the context's."""
        return self.verifier_options if self.verifier_options is not None else state["options"]

    def _run(self, sample: Sample, code: str, public: Mapping[str, Any],
             options: Mapping[str, Any], grading: Grading) -> TestRun:
        kwargs = {k: options[k] for k in RUN_OPTIONS if k in options}
        if isinstance(kwargs.get("limits"), Mapping):  # from a YAML/JSON task spec
            kwargs["limits"] = Limits(**kwargs["limits"])
        try:
            return run_tests(code, public, sandbox=grading.sandbox, runner=code_runner(grading),
                             **kwargs)
        except (TestFormatError, SandboxFailure) as e:
            raise SessionFailed(f"tests_feedback: sample {sample.id!r}: public tests: "
                                f"{truncate(str(e))}") from e

    def render(self, shown: Sequence[Failure], n_failed: int, n_public: int | None) -> str:
        """The feedback message: a header, each shown failure, the request; cut to the cap.
        `n_public` None: the public asserts ran as one check, which stops at its first
        failure."""
        if n_public is None:
            head = "Your solution failed the public tests (they stop at the first failure).\n\n"
        else:
            head = (f"Your solution failed {n_failed} of the {n_public} public "
                    f"test{'s' if n_public != 1 else ''}"
                    + (f" (the first {len(shown)} are shown)" if len(shown) < n_failed else "")
                    + ".\n\n")
        body = "\n".join(self._block(f) for f in shown)
        tail = "\n" + ASK
        cap = self.max_observation_chars
        if len(head) + len(body) + len(tail) <= cap:
            return head + body + tail
        cut = CUT.format(n=cap)
        room = cap - len(head) - len(tail) - len(cut)
        if room <= 0:
            return (head + body)[:cap - len(cut)] + cut
        return head + body[:room] + cut + tail

    def _block(self, f: Failure) -> str:
        cap = self.max_shown_chars
        lines = [f"Test {f.index + 1}: {_HEADLINE[f.kind]}", _field(f.label, f.test, cap)]
        if f.expected is not None:
            lines.append(_field("Expected", f.expected, cap))
        lines.append(_field("Got", f.got, cap))
        return "\n".join(lines) + "\n"


_HEADLINE = {"wrong": "failed", "timeout": "timed out", "error": "the test could not run"}


def _field(label: str, text: str, cap: int) -> str:
    text = truncate(text, cap).rstrip("\n")
    return f"{label}:\n{text}" if "\n" in text else f"{label}: {text.rstrip()}"


def failure(public: Mapping[str, Any], run: TestRun, index: int) -> Failure:
    """What to show of failing public test `index`: the test, the expected value, and what the
    program gave (its output or returned value when the harness reported one, else the
    verdict's detail: the error, or the time limit it passed)."""
    result = run.results[index]
    record = run.records.get(index, {})
    kind = "wrong" if result.kind == "pass" else result.kind
    mode = run.plan.spec["mode"]
    if mode == "stdio":
        out = record.get("stdout") if record.get("status") == "ok" else None
        return Failure(index, kind, _text(public["inputs"][index]), "Input",
                       _text(public["outputs"][index]),
                       out if isinstance(out, str) and kind == "wrong" else result.detail)
    got = _returned(record) if kind == "wrong" else None
    got = got if got is not None else result.detail
    if mode == "call" and public.get("type", "call") == "call":
        args = public["inputs"][index]
        shown = ", ".join(map(repr, args)) if isinstance(args, list) else repr(args)
        return Failure(index, kind, f"{public['fn_name']}({shown})", "Input",
                       repr(public["outputs"][index]), got)
    return Failure(index, kind, _assertion(public, index, result.detail), "Test", None, got)


def _text(value: Any) -> str:
    return "\n".join(value) if isinstance(value, list) else str(value)


def _returned(record: Mapping[str, Any]) -> str | None:
    """`returned <repr>` of a call record's value, or None when it has none."""
    if record.get("ok") is not True or "value" not in record:
        return None
    try:
        return f"returned {untag(record['value'])!r}"
    except (ValueError, TypeError, RecursionError):
        return None


def _assertion(public: Mapping[str, Any], index: int, detail: str) -> str:
    """The assert statement behind assert test `index`: the check's source line of that call
    test, or, when the check ran as one test, the line its failure names (else the check)."""
    source = str(public.get("test", ""))
    lines = source.splitlines()
    names, _ = bound_names(str(public.get("setup", "")))
    cases = convert_check(source, names)
    if cases is not None and index < len(cases):
        line = cases[index].line
    else:
        found = re.search(r"\bline (\d+):", detail)
        line = int(found.group(1)) if found else 0
    return lines[line - 1].strip() if 0 < line <= len(lines) else source.strip()


class FeedbackTask(PlayedTask):
    """A task played with test feedback (envs/played.py `PlayedTask`): the inner task's name,
    samples, judge, options and data settings (`with_data`, `with_revision` keep the feedback),
    with `environment` a `tests_feedback` environment carrying the inner task's verifier
    options."""

    def __init__(self, inner: Task, environment: TestsFeedback, note: str = "",
                 system_suffix: str | None = None) -> None:
        super().__init__(inner, environment, note or f"test feedback, up to "
                         f"{environment.max_turns} answers", system_suffix)


def with_feedback(task: Task, max_turns: int = 3, **options: Any) -> FeedbackTask:
    """`task` played with test feedback (a `FeedbackTask`: same name, same samples, same judge),
    up to `max_turns` answers. `options`: the environment's own (max_observation_chars,
    max_shown_chars, max_failures). ValueError for a task not of the `code` kind."""
    if task.kind != "code":
        raise ValueError(f"task {task.name!r} is of kind {task.kind!r}: test feedback needs a "
                         "`code` task (its samples carry tests)")
    inner = task.inner if isinstance(task, FeedbackTask) else task
    env = TestsFeedback(max_turns=max_turns, verifier_options=inner.verifier_options(),
                        **options)
    return FeedbackTask(inner, env)


@register_task_prefix("feedback", description="a code task played with test feedback (public "
                      "tests' failures as the next turn, up to 3 answers), e.g. "
                      "feedback:livecodebench:2024-08..2025-02, feedback:mbpp, "
                      "feedback:humaneval")
def feedback_variant(name: str) -> FeedbackTask:
    """`feedback:<task>`: the code task `<task>` (any registered name, a prefix family's
    included) with test feedback, up to 3 answers; the task keeps its own name."""
    task = lookup_task(name)
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r} is a {type(task).__name__}, not a scalerl Task")
    return with_feedback(task)
