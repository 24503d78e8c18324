"""`scalerl score [FILE|-]`: score model outputs offline, JSONL in, JSONL out, in input order.

A row is `{"id", "kind", "completion", <the kind's gold field>}` or `{"id", "task", "sample_id",
"completion"}`; for a task with an environment (tools, test feedback), `"turns": [assistant text,
...]` instead of the completion: the environment is replayed (envs/replay.py: its tool calls
really run in the sandbox) and the row gets the observations it gave (`messages`, `tool_calls`,
`turns_played`, `ended`) beside the verdict. Rows are scored by a thread pool calling the kind's
(or task's) score function (math goes through the verifier process pool, code through the sandbox)
and each output row is written and flushed as soon as it and every earlier row are done, so an
interrupted run keeps what it scored. A malformed row stops the run (after earlier rows are
written) with exit 2, or is reported and skipped with `--skip-bad`. The summary goes to stderr.
`score_rows` is the loop without files (each `Verdict` handed to a callback, in input order):
what `scalerl.api.score` calls.
"""

from __future__ import annotations

import argparse
import collections
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any

from scalerl.commands import CommandError
from scalerl.commands.engine_args import add_grading_args, grading
from scalerl.envs.base import STATUSES, Sample, Score, dumps, truncate
from scalerl.envs.catalog import get_kind, task_names
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.registry import UnknownTaskError
from scalerl.local_data import Sources, add_task_args, sources_from_args
from scalerl.trainer.rewards import RewardMap

if TYPE_CHECKING:
    from scalerl.envs.replay import Replayed

REWARDS = RewardMap()
"""The `reward` column: the trainer's default mapping (ScaleRL: +1 correct, -1 otherwise; a
graded verdict's `credit` in [0, 1] placed linearly between them)."""

HELP = "score model outputs offline (JSONL rows in, one verdict per row out, in input order)"


class BadRow(ValueError):
    """A malformed input row; the message says what is wrong (the caller adds the line)."""


@dataclass(frozen=True)
class Job:
    """One input row, resolved: its id and a call that scores it."""

    line: int
    id: Any
    score: Callable[[], Score | tuple[Score, Replayed]]
    """The verdict, or (verdict, what the replay gave) for a replayed multi-turn row."""


@dataclass(frozen=True)
class Verdict:
    """One row's verdict, as the output row (`to_row`) says it."""

    id: Any
    """The row's `id`."""
    status: str
    """correct | wrong | no_answer | timeout | error"""
    reward: float
    """The trainer's default reward for it (REWARDS)."""
    detail: str
    """Why (the verifier's own words)."""
    latency_s: float
    credit: float | None = None
    """A graded verdict's credit in [0, 1]; None for all-or-nothing verdicts."""
    replay: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """For a `turns` row: `messages`, `tool_calls`, `turns_played`, `ended` (envs/replay.py)."""

    def to_row(self) -> dict[str, Any]:
        """The output row `scalerl score` writes."""
        return {"id": self.id, "status": self.status, "reward": self.reward,
                "detail": self.detail, "latency_s": self.latency_s,
                } | ({"credit": self.credit} if self.credit is not None else {}) | dict(self.replay)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", nargs="?", default="-", help="JSONL file, or - for stdin")
    parser.add_argument("--out", default="-", help="output JSONL file (default: stdout)")
    parser.add_argument("--workers", type=int, default=4, help="rows scored concurrently (4)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="report malformed rows on stderr and skip them instead of stopping")
    parser.add_argument("--tool-format", choices=("plain", "chat"), default="plain",
                        help="how the tool calls in \"turns\" rows are written (default plain: "
                        "a ```python block answered by ```output; chat: <tool_call> JSON)")
    add_task_args(parser)
    add_grading_args(parser)


# --- rows -> jobs -------------------------------------------------------------------------------
class Resolver:
    """Turns rows into Jobs; caches each task's sample index (id -> Sample). `sources`: local
    copies and hub revisions by task (or family) name, as `--data`/`--revision` give them."""

    def __init__(self, sources: Sources | None = None, tool_format: str = "plain",
                 grading: Grading = DEFAULT_GRADING) -> None:
        self.grading = grading
        self._index: dict[str, dict[str, Sample]] = {}
        self._sources = sources or Sources()
        self._tool_format = tool_format
        self._context: Any = None

    def context(self) -> Any:
        """The environments' context for replayed rows, made at the first one: tool sessions
        in the grading's sandbox (a pool started at the first tool call)."""
        if self._context is None:
            from scalerl.envs.context import run_context

            self._context = run_context(self._tool_format, None, self.grading)
        return self._context

    def close(self) -> None:
        if self._context is not None:
            self._context.sessions.close()

    def job(self, text: str, line: int) -> Job:
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRow(f"invalid JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(row, dict):
            raise BadRow(f"expected a JSON object, got {type(row).__name__}")
        if row.get("id") is None:
            raise BadRow('missing "id"')
        turns = row.get("turns")
        if turns is not None:
            if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
                raise BadRow('"turns" must be a non-empty list of strings (the assistant turns)')
            if "task" not in row:
                raise BadRow('a "turns" row needs "task" and "sample_id" (a task with an '
                             'environment)')
        elif not isinstance(row.get("completion"), str):
            raise BadRow('"completion" must be a string')
        if "task" in row:
            return self._task_job(row, line)
        if "kind" in row:
            return _kind_job(row, line, self.grading)
        raise BadRow('a row needs "kind" (with its gold field) or "task" and "sample_id"')

    def _task_job(self, row: Mapping[str, Any], line: int) -> Job:
        name, sample_id = str(row["task"]), row.get("sample_id")
        if sample_id is None:
            raise BadRow('a "task" row needs "sample_id"')
        try:
            task = self._sources.task(name)
        except (UnknownTaskError, ValueError) as exc:
            raise BadRow(str(exc)) from exc
        if name not in self._index:
            try:
                samples = [s for split in task.splits for s in task.samples(split)]
            except ValueError as exc:  # DataError included: the task's data cannot be read
                raise BadRow(f"task {name!r} cannot load its samples: {exc}") from exc
            self._index[name] = {s.id: s for s in samples}
        sample = self._index[name].get(str(sample_id))
        if sample is None:
            raise BadRow(f"task {name!r} has no sample {str(sample_id)!r}")
        if "turns" in row:
            return self._replay_job(row, line, task, sample)
        completion = row["completion"]
        return Job(line, row["id"], lambda: task.score(sample, completion, self.grading))

    def _replay_job(self, row: Mapping[str, Any], line: int, task: Any, sample: Sample) -> Job:
        from scalerl.envs.replay import replay

        if task.environment is None:
            raise BadRow(f'task {task.name!r} has no environment: "turns" rows are for multi-'
                         'turn tasks (tools, test feedback); give "completion"')
        turns, context = list(row["turns"]), self.context()

        def score() -> tuple[Score, Replayed]:
            return replay(task, sample, turns, context, self.grading)

        return Job(line, row["id"], score)


def _kind_job(row: Mapping[str, Any], line: int, grading: Grading = DEFAULT_GRADING) -> Job:
    try:
        kind = get_kind(str(row["kind"]))
    except UnknownTaskError as exc:
        raise BadRow(str(exc)) from exc
    gold = row.get(kind.gold_field)
    if gold is None or gold == "":
        raise BadRow(f'a "{kind.name}" row needs "{kind.gold_field}"')
    if kind.gold_field == "answer":
        if isinstance(gold, bool) or not isinstance(gold, str | int | float):
            raise BadRow('"answer" must be a string or a number')
        gold = str(gold)
    options = row.get("options") or {}
    if not isinstance(options, dict):
        raise BadRow('"options" must be an object')
    sample = Sample(id=str(row["id"]), task=f"<{kind.name}>", prompt="", **{kind.gold_field: gold})
    completion = row["completion"]
    return Job(line, row["id"], lambda: kind.score(sample, completion, options, grading))


def run_job(job: Job) -> Verdict:
    """The verdict on one job. A score function that raises is an `error`, not a 0."""
    t0 = time.monotonic()
    replayed: Replayed | None = None
    try:
        score = job.score()
        if isinstance(score, tuple):
            score, replayed = score
    except Exception as exc:  # the verifier's own failure is reported as status `error`
        score = Score("error", truncate(f"{type(exc).__name__}: {exc}"))
    extra = MappingProxyType(replayed.to_dict()) if replayed is not None else MappingProxyType({})
    return Verdict(job.id, score.status, REWARDS(score.status, score.reward), score.detail,
                   round(time.monotonic() - t0, 6), score.reward, extra)


# --- the ordered streaming loop -----------------------------------------------------------------
def _emitter(
    futures: queue.Queue, emit: Callable[[Verdict], None], counts: collections.Counter,
    failed: list[str], stop: threading.Event,
) -> None:
    """Hand verdicts to `emit` in input order, each as soon as it and all earlier ones are done.
    After an emit error (OSError/ValueError: the output cannot be written) it keeps draining (so
    the reader never blocks) and records the error; after an interruption (`stop`) it emits
    nothing more."""
    while (fut := futures.get()) is not None:
        try:
            verdict = fut.result()
        except CancelledError:  # the run was interrupted; later rows are not written
            break
        if stop.is_set():
            break
        if failed:
            continue
        try:
            emit(verdict)
        except (OSError, ValueError) as exc:  # ValueError: the file was closed under us
            failed.append(f"cannot write output: {exc}")
            continue
        counts[verdict.status] += 1


def _write_to(out: IO[str]) -> Callable[[Verdict], None]:
    def write(verdict: Verdict) -> None:
        out.write(dumps(verdict.to_row()) + "\n")
        out.flush()

    return write


def score_lines(
    lines: Iterable[str], out: IO[str], err: IO[str], *, workers: int, skip_bad: bool,
    sources: Sources | None = None, tool_format: str = "plain",
    grading: Grading = DEFAULT_GRADING,
) -> tuple[collections.Counter, int, str | None]:
    """(counts by status, rows skipped, the fatal `line N: ...` message or None); each output
    row written to `out` and flushed as soon as it and every earlier row are done."""
    return score_rows(lines, _write_to(out), err, workers=workers, skip_bad=skip_bad,
                      sources=sources, tool_format=tool_format, grading=grading)


def score_rows(
    lines: Iterable[str], emit: Callable[[Verdict], None], err: IO[str], *, workers: int,
    skip_bad: bool, sources: Sources | None = None, tool_format: str = "plain",
    grading: Grading = DEFAULT_GRADING,
) -> tuple[collections.Counter, int, str | None]:
    """`score_lines` with each Verdict handed to `emit` (in input order) instead of written;
    `grading`: where and how rows are graded (this machine's defaults, or a Ray cluster)."""
    counts: collections.Counter = collections.Counter()
    futures: queue.Queue[Future | None] = queue.Queue(maxsize=4 * workers)  # backpressure
    failed: list[str] = []
    stop = threading.Event()
    emitter = threading.Thread(
        target=_emitter, args=(futures, emit, counts, failed, stop), daemon=True
    )
    emitter.start()
    resolver, skipped, fatal = Resolver(sources, tool_format, grading), 0, None
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="score")
    try:
        for n, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                job = resolver.job(text, n)
            except BadRow as exc:
                if not skip_bad:
                    fatal = f"line {n}: {exc}"
                    break
                skipped += 1
                print(f"line {n}: {exc} (skipped)", file=err)
                continue
            futures.put(pool.submit(run_job, job))
        futures.put(None)
        emitter.join()
    except BaseException:  # Ctrl-C: drop queued rows; rows already written stay written
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        resolver.close()
        raise
    pool.shutdown(wait=True)
    resolver.close()
    return counts, skipped, fatal or (failed[0] if failed else None)


def summary(counts: Mapping[str, int], skipped: int, seconds: float) -> str:
    total = sum(counts.values())
    by_status = ", ".join(f"{s} {counts.get(s, 0)}" for s in STATUSES)
    text = f"scored {total} rows in {seconds:.2f} s ({total / max(seconds, 1e-9):.1f} rows/s): "
    return text + by_status + (f"; skipped {skipped} malformed rows" if skipped else "")


def check(args: argparse.Namespace) -> tuple[Sources, Grading]:
    """The settings checked, plugins and `--spec`s loaded: the task sources and the grading;
    CommandError (exit 2) with the line `scalerl score` prints."""
    if args.workers < 1:
        raise CommandError(f"scalerl score: --workers must be >= 1, got {args.workers}")
    try:
        task_names()  # built-ins and plugins load here, so a broken plugin is one line
        return sources_from_args(args), grading(args)
    except (OSError, ValueError, RuntimeError) as exc:
        raise CommandError(f"scalerl score: {exc}") from None


def run(args: argparse.Namespace) -> int:
    try:
        sources, graded = check(args)
        src = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")  # noqa: SIM115
        out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")  # noqa: SIM115
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    except (OSError, ValueError) as exc:
        print(f"scalerl score: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        counts, skipped, fatal = score_lines(
            src, out, sys.stderr, workers=args.workers, skip_bad=args.skip_bad, sources=sources,
            tool_format=args.tool_format, grading=graded)
    finally:
        for f in (src, out):
            if f not in (sys.stdin, sys.stdout):
                f.close()
    print(summary(counts, skipped, time.monotonic() - t0), file=sys.stderr)
    if fatal:
        print(f"scalerl score: {fatal}", file=sys.stderr)
        return 2
    return 0
