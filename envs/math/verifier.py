"""The math verifier: math-verify extraction and comparison, run in a deadline-enforcing pool.

`score_math` strips the thinking part, caps the answer's length, decides a lone boxed integer
against an integer gold at once (envs/math/exact.py), and checks anything else against the gold
answer in a worker process (envs/deadline_pool.py) that is killed if it passes its deadline.
Gold answers are parsed once per worker and cached; exact rationals are compared exactly before
math-verify's float tolerance can call 1/2^98 equal to 1/2^99. It never raises: failures are
`error`/`timeout`. Registers the `math` kind (with the Polaris/MATH gold reader of
envs/math/files.py). It does not import math-verify until a worker checks an answer, and builds
no tasks.
"""

from __future__ import annotations

import collections
import functools
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scalerl.envs.base import Score, truncate
from scalerl.envs.deadline_pool import Outcome, Pool, default_size
from scalerl.envs.grading import DEFAULT_GRADING, Grading, cluster_grader
from scalerl.envs.kinds import Kind, register_kind
from scalerl.envs.math.exact import (  # noqa: F401 (exact_value: part of this module's API)
    exact_equal,
    exact_value,
    integer_verdict,
)
from scalerl.envs.math.files import MATH_GOLD_COLUMNS, read_math_gold

MATH_SYSTEM_PROMPT = (
    "Solve the problem. Reason step by step, then give the final answer in \\boxed{}, "
    "for example \\boxed{\\frac{3}{4}}."
)
MAX_ANSWER_CHARS = 8000
"""The answer part (after thinking is stripped) is cut to its last this-many characters."""
MAX_GOLD_CHARS = 8000
"""A gold answer is cut to its last this-many characters."""
_log = logging.getLogger(__name__)

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_DELIMITERS = ("\\(", "\\[", "\\boxed", "\\fbox")
_DOLLAR = re.compile(r"(?<!\\)(?:\\\\)*\$")
"""An unescaped `$` (after an even run of backslashes): `\\$` is a dollar sign, not math."""
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_JOIN = re.compile(r"^[\s$]*(?:,?\s*and|,?\s*or|,)?[\s$]*$")


# --- the parent side: cheap text handling, then a deadline-enforced check in the pool ----------
def strip_thinking(completion: str, requires_thinking: bool) -> str | None:
    """The answer part: everything after the last `</think>`.

    None (no answer) when `requires_thinking` and there is no `</think>`, or when a `<think>` was
    opened and never closed (the completion stopped inside its thinking).
    """
    end = completion.rfind(_THINK_CLOSE)
    if end >= 0:
        return completion[end + len(_THINK_CLOSE):]
    if requires_thinking or _THINK_OPEN in completion:
        return None
    return completion


def score_math(
    completion: str,
    gold: str,
    *,
    requires_thinking: bool = False,
    boxed_only: bool = False,
    timeout_s: float = 5.0,
    pool: Pool | None = None,
) -> Score:
    """Verdict on one completion against a gold answer (raw LaTeX or text), checked in `pool`
    (default: the shared pool of the default size). Never raises."""
    return score_math_many(
        [(completion, gold)], requires_thinking=requires_thinking, boxed_only=boxed_only,
        timeout_s=timeout_s, pool=pool,
    )[0]


def score_math_many(
    items: Sequence[tuple[str, str]],
    *,
    requires_thinking: bool = False,
    boxed_only: bool = False,
    timeout_s: float = 5.0,
    pool: Pool | None = None,
) -> list[Score]:
    """Verdicts on (completion, gold) pairs, checked concurrently in the pool, in input order."""
    scores: list[Score | None] = [None] * len(items)
    jobs: list[tuple[int, tuple[str, str, bool], str]] = []
    for i, item in enumerate(items):
        t0 = time.monotonic()
        early, job, note = _prepare(item, requires_thinking, boxed_only)
        if early is not None:
            status, detail = early
            scores[i] = Score(status, detail, time.monotonic() - t0)
        else:
            jobs.append((i, job, note))
    if jobs:
        outcomes = _run_checks(pool, [job for _, job, _ in jobs], timeout_s)
        for (i, job, note), outcome in zip(jobs, outcomes, strict=True):
            status, detail = _status_of(outcome)
            if status in ("timeout", "error"):
                _log.warning("math verifier %s: %s; answer %s; gold %s", status, detail,
                             truncate(job[0], 200), truncate(job[1], 100))
            scores[i] = Score(status, detail + note, outcome.latency_s)
    return scores  # type: ignore[return-value]


def _prepare(item: Any, requires_thinking: bool, boxed_only: bool):
    """((status, detail), None, "") when decided without math-verify, else (None, job, note)."""
    completion, gold = item if isinstance(item, tuple | list) and len(item) == 2 else (item, None)
    if not isinstance(completion, str) or not isinstance(gold, str):
        return ("error", f"completion and gold must be strings, got "
                f"{type(completion).__name__} and {type(gold).__name__}"), None, ""
    if not gold.strip():
        return ("error", "gold answer is empty"), None, ""
    answer = strip_thinking(completion, requires_thinking)
    if answer is None:
        why = "no </think>" if _THINK_OPEN not in completion else "<think> never closed"
        return ("no_answer", f"{why}: the completion has no answer part"), None, ""
    if boxed_only and not _BOXED.search(answer):
        return ("no_answer", "no \\boxed{} answer (boxed-only)"), None, ""
    note = ""
    if len(answer) > MAX_ANSWER_CHARS:
        note = f" [answer cut to its last {MAX_ANSWER_CHARS} of {len(answer)} chars]"
        answer = answer[-MAX_ANSWER_CHARS:]
    if len(gold) > MAX_GOLD_CHARS:
        note += f" [gold cut to its last {MAX_GOLD_CHARS} of {len(gold)} chars]"
    fast = integer_verdict(answer, gold)
    if fast is not None:
        return fast, None, ""
    return None, (answer, gold[-MAX_GOLD_CHARS:], boxed_only), note


def _status_of(outcome: Outcome) -> tuple[str, str]:
    if outcome.status == "ok":
        status, detail = outcome.value
        return status, detail
    if outcome.status == "timeout":
        return "timeout", outcome.detail
    return "error", f"math check failed: {truncate(outcome.detail)}"


def _run_checks(pool: Pool | None, jobs: list[tuple], timeout_s: float) -> list[Outcome]:
    try:
        pool = pool or shared_pool(None)
        return pool.run_many(check_answer, jobs, timeout_s, affinity=_gold_of)
    except Exception as exc:  # noqa: BLE001 - the pool itself failed: every item is an error
        detail = f"verifier pool failed: {type(exc).__name__}: {truncate(str(exc))}"
        return [Outcome("error", detail=detail) for _ in jobs]


def _gold_of(job: tuple[str, str, bool]) -> str:
    """Affinity key: rows with the same gold go to the worker that has it parsed already."""
    return job[1]


# --- the shared pools, one per size ------------------------------------------------------------
_POOLS: dict[int | None, Pool] = {}
_POOLS_LOCK = threading.Lock()


_WARM_UP_PAIRS = (
    ("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}"), ("so $\\boxed{2\\sqrt{3}}$.", "\\sqrt{12}"),
    ("\\boxed{[-1, 3)}", "[-1,3)"), ("\\boxed{-2} and \\boxed{1}", "1, -2"),
    ("\\boxed{(x+1)^2}", "x^2+2x+1"), ("The answer is 0.75", "75\\%"),
    ("$x = \\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}$", "x=5"), ("\\boxed{(1, \\infty)}", "(1,\\infty)"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\boxed{\\text{Even}}", "\\text{Even}"), ("\\boxed{3\\pi/2}", "\\frac{3\\pi}{2}"),
)
_warm = False


def warm_up() -> None:
    """Check a few typical answers so the parser caches of this process are warm (~1 s, once)."""
    global _warm
    if not _warm:
        _worker_init()
        for answer, gold in _WARM_UP_PAIRS:
            check_answer(answer, gold, False)
        parse_gold.cache_clear()
        _VERDICTS.clear()
        _warm = True


def _worker_init() -> None:
    """Quiet math-verify's logs (they would print whole completions). Workers forked from a
    forkserver that preloaded scalerl.envs.math.warmup also start with warm parser caches."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


def shared_pool(workers: int | None) -> Pool:
    """The shared verifier pool of `workers` processes (None: the default size, min(4, cpus)),
    made once per size (None and the default's number share one) and started on first use; a
    size below 1 is a ValueError."""
    size = default_size() if workers is None else workers
    with _POOLS_LOCK:
        if size not in _POOLS:
            _POOLS[size] = make_pool(size)  # checks the size; workers start on first use
        return _POOLS[size]


def shutdown_pools() -> None:
    """Stop every shared pool's workers (a later call starts new ones)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        pool.shutdown()


def make_pool(size: int | None = None) -> Pool:
    """A pool whose workers start with math-verify imported and warm (forkserver preload)."""
    return Pool(size, initializer=_worker_init, preload=["scalerl.envs.math.warmup"])


# --- the worker side: runs inside a pool process -----------------------------------------------
def check_answer(answer: str, gold: str, boxed_only: bool) -> tuple[str, str]:
    """(status, detail) for one answer text against one gold answer. Runs in a pool worker."""
    from math_verify import verify

    gold_parsed = parse_gold(gold)
    if not gold_parsed:
        return "error", f"gold answer is unparseable by math-verify: {truncate(gold, 120)}"
    pred = parse_answer(answer, boxed_only)
    if not pred:
        return "no_answer", "no answer extracted" + (" from \\boxed{}" if boxed_only else "")
    shown = f"answer {truncate(str(pred[-1]), 120)} vs gold {truncate(str(gold_parsed[-1]), 120)}"
    exact = exact_equal(gold_parsed[0], pred[0])
    if exact is not None:
        return ("correct" if exact else "wrong"), f"{shown} (exact rational)"
    key = _verdict_key(gold, pred)
    ok = _VERDICTS.get(key) if key else None
    if ok is None:
        ok = bool(verify(list(gold_parsed), pred, timeout_seconds=None))
        if key:
            _VERDICTS[key] = ok
            if len(_VERDICTS) > MAX_CACHED_VERDICTS:
                _VERDICTS.popitem(last=False)
    return ("correct" if ok else "wrong"), shown


_VERDICTS: collections.OrderedDict[tuple, bool] = collections.OrderedDict()
MAX_CACHED_VERDICTS = 16384


def _verdict_key(gold: str, pred: list) -> tuple | None:
    """Completions of one prompt often reach the same answer: a verdict is a pure function of
    the gold and the parsed answer, so it is remembered per worker, keyed by the parsed answer's
    printed form (only for short answers, whose printing is cheap)."""
    if any(len(p) > 300 for p in pred if isinstance(p, str)):
        return None
    try:
        return (gold, *((type(p).__name__, str(p)) for p in pred))
    except ValueError:  # e.g. an integer over Python's 4,300-digit str() limit: do not cache
        return None


@functools.lru_cache(maxsize=4096)
def parse_gold(gold: str) -> tuple:
    """Gold parsed once per worker. A gold without math delimiters (raw LaTeX or text, as MATH and
    Polaris store it) is parsed as `$gold$`, then as plain text if that yields nothing: raw,
    math-verify reads `2\\sqrt{3}` as 2, `-2,1` as -2.1 and `\\sqrt{2}` as nothing. Only an
    unescaped `$` delimits: MATH's `\\$18.90` is a dollar amount in raw LaTeX."""
    from math_verify import parse

    text = gold.strip()
    if _DOLLAR.search(text) or any(d in text for d in _DELIMITERS):
        return tuple(parse(text, parsing_timeout=None))
    return tuple(parse(f"${text}$", parsing_timeout=None) or parse(text, parsing_timeout=None))


def parse_answer(answer: str, boxed_only: bool) -> list:
    """math-verify's extraction: boxed first (adjacent boxed answers read together), then its
    LaTeX and plain-expression fall-backs; with `boxed_only`, only the last run of boxed."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    if boxed_only:
        span = last_boxed_run(answer)
        if span is None:
            return []
        config = [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)]
        return parse(span, extraction_config=config, parsing_timeout=None)
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return parse(answer, extraction_config=config, parsing_timeout=None)


def last_boxed_run(text: str) -> str | None:
    """The text of the last `\\boxed{..}` together with the boxed answers just before it that
    are joined to it by commas, 'and' or 'or' (as math-verify reads them), or None."""
    spans: list[tuple[int, int]] = []
    for m in _BOXED.finditer(text):
        end = _match_brace(text, m.end() - 1)
        if end is not None and (not spans or m.start() >= spans[-1][1]):
            spans.append((m.start(), end))
    if not spans:
        return None
    first = len(spans) - 1
    while first > 0 and _BOXED_JOIN.match(text[spans[first - 1][1]:spans[first][0]]):
        first -= 1
    return text[spans[first][0]:spans[-1][1]]


def _match_brace(text: str, open_at: int) -> int | None:
    depth = 0
    for j in range(open_at, len(text)):
        c = text[j]
        if c == "{" and text[j - 1] != "\\":
            depth += 1
        elif c == "}" and text[j - 1] != "\\":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


MATH_OPTIONS: tuple[str, ...] = ("requires_thinking", "boxed_only", "timeout_s")
"""Options a task of the `math` kind may set (task spec `options:`)."""


def score_kind(sample: Any, completion: str, options: Mapping[str, Any],
               grading: Grading = DEFAULT_GRADING) -> Score:
    """The `math` kind's scorer: `score_math` with the task's options, in the pool of the run's
    `verifiers.math_workers` (on a Ray cluster: that pool on a grading actor). Never raises."""
    workers, remote = grading.verifiers.math_workers, cluster_grader(grading)
    pool = remote.math_pool(shared_pool, workers) if remote is not None else shared_pool(workers)
    return score_math(completion, sample.answer, **options, pool=pool)


register_kind(Kind(
    name="math", score=score_kind, gold_field="answer", system_prompt=MATH_SYSTEM_PROMPT,
    gold_columns=MATH_GOLD_COLUMNS, read_gold=read_math_gold, options=MATH_OPTIONS))
