"""LiveCodeBench (code generation, lite): `livecodebench` and `livecodebench:<window>`.

The hub copy (`livecodebench/code_generation_lite`) shipped a loading script, which `datasets`
4+ no longer runs, so its release files are read directly (`test.jsonl` ... `test6.jsonl`,
release_v6 = all of them). A row's tests are its public tests (a JSON list of {input, output,
testtype}; the first `public` of the sample's tests, envs/code/public.py) plus its private
tests, stored as that JSON list pickled, zlib-compressed and base64-encoded: `decode_private`
undoes that with an unpickler that builds only plain values (str, numbers, lists, dicts) and
refuses any class. Grading follows LiveCodeBench's harness
(lcb_runner/evaluation/testing_util.py, compute_code_generation_metrics.py) through the `lcb`
comparison rule (envs/code/rules.py): `stdin` output as stripped lines, then tokens as Decimals;
`functional` tests call `Solution().<func_name>` (metadata) with one JSON argument per input
line and compare with `==`; its imports before every program, 6 s a test, a global
(6 + 1) * tests + 5 s, 50,000-digit ints. A window `A..B` (days `YYYY-MM-DD` or months
`YYYY-MM`, either side open) keeps the problems whose `contest_date` is in it, compared on full
timestamps as LiveCodeBench's `--start_date/--end_date` are: each end is midnight of its day, a
month start its first day, a month end its last day. The default `livecodebench` (every window)
holds, by construction, the LiveCodeBench problems DeepCoder's lcbv5 config trains on (contest
dates 2023-05 to 2024-07); a DeepCoder-trained model is evaluated on a later window, e.g.
`livecodebench:2024-08-01..2025-02-01`, DeepCoder's own. Nothing runs here.
"""

from __future__ import annotations

import base64
import calendar
import datetime as dt
import io
import json
import pickle
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from scalerl.envs.base import Sample
from scalerl.envs.bench.code_sets import bench_tests, code_prompt, metadata_of
from scalerl.envs.bench.hub import HubSource
from scalerl.envs.bench.math_sets import text_of
from scalerl.envs.bench.task import Benchmark, HubTask, register_benchmark
from scalerl.envs.code.public import with_public
from scalerl.envs.kinds import UnknownTaskError
from scalerl.envs.registry import register_task_prefix

RELEASE_FILES = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                 "test6.jsonl")
"""release_v1 and the increments up to release_v6, in the hub repo."""
IMPORTS = ("from string import *\nfrom re import *\nfrom datetime import *\n"
           "from collections import *\nfrom heapq import *\nfrom bisect import *\n"
           "from copy import *\nfrom math import *\nfrom random import *\n"
           "from statistics import *\nfrom itertools import *\nfrom functools import *\n"
           "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
           "from builtins import *\nfrom typing import *\nimport string\nimport re\n"
           "import datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
           "import math\nimport random\nimport statistics\nimport itertools\nimport functools\n"
           "import operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n")
"""What LiveCodeBench's harness puts before every program (its `import_string`)."""
OPTIONS = MappingProxyType({"test_timeout_s": 6.0, "compare": "lcb"})
"""The harness's 6 s per test (it ignores a problem's stated limit) and its comparison rule."""
MAX_PRIVATE_BYTES = 1 << 30
"""A private-test blob that inflates past this is refused (a zlib bomb, not a problem)."""
_WINDOW_END = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle's own opcodes make (str, bytes, numbers, lists, dicts, tuples,
    sets); any class or callable is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: private tests hold "
                                     "plain data only")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refusing a persistent id")


def _plain(value: Any, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(value, str | int | float | bool) or value is None:
        return True
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def decode_private(blob: str) -> list[dict[str, Any]]:
    """LiveCodeBench's private tests: plain JSON text, or base64(zlib(pickle(JSON text)));
    ValueError for anything else, or for anything but a list of test objects."""
    try:
        value: Any = json.loads(blob)
    except json.JSONDecodeError:
        try:
            packed = base64.b64decode(blob.encode("ascii"), validate=True)
            inflater = zlib.decompressobj()
            raw = inflater.decompress(packed, MAX_PRIVATE_BYTES)
            if inflater.unconsumed_tail:
                raise ValueError(f"private tests inflate past {MAX_PRIVATE_BYTES} bytes")
            value = _PlainUnpickler(io.BytesIO(raw)).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as exc:
            raise ValueError(f"private_test_cases: not JSON nor base64/zlib/pickle ({exc})"
                             ) from exc
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if isinstance(value, str):
            value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value) or not _plain(
            value):
        raise ValueError("private_test_cases must decode to a list of {input, output, testtype}")
    return value


@dataclass(frozen=True)
class Window:
    """Contest dates kept: from `start` to `end`, both inclusive, on full timestamps (None:
    open)."""

    start: dt.datetime | None
    end: dt.datetime | None

    def __post_init__(self) -> None:
        if self.start and self.end and self.start > self.end:
            raise ValueError(f"window starts {_show(self.start)} after it ends {_show(self.end)}")

    def __contains__(self, when: dt.datetime) -> bool:
        return (self.start is None or self.start <= when) and (self.end is None
                                                               or when <= self.end)

    def describe(self) -> str:
        ends = (_show(self.start) if self.start else "...", _show(self.end) if self.end else "...")
        return f"contest_date {ends[0]} to {ends[1]}"


def _show(when: dt.datetime) -> str:
    return when.date().isoformat() if when.time() == dt.time() else when.isoformat()


def _end(text: str, *, end: bool) -> dt.datetime | None:
    """Midnight of the day `text` names (a month: its first day, or its last as an end)."""
    if not text:
        return None
    match = _WINDOW_END.match(text)
    if not match:
        raise ValueError(f"{text!r} is not YYYY-MM or YYYY-MM-DD")
    year, month = int(match.group(1)), int(match.group(2))
    if match.group(3):
        return dt.datetime(year, month, int(match.group(3)))
    return dt.datetime(year, month, calendar.monthrange(year, month)[1] if end else 1)


def parse_window(text: str) -> Window:
    """`2024-08-01..2025-02-01` (LiveCodeBench's start and end dates), `2024-08..2025-02`
    (= `2024-08-01..2025-02-28`), `2024-08..` (open)."""
    start, sep, end = text.partition("..")
    try:
        if not sep or not (start or end):
            raise ValueError("expected A..B")
        return Window(_end(start, end=False), _end(end, end=True))
    except ValueError as exc:
        raise UnknownTaskError(f"livecodebench window {text!r}: {exc}; write it as START..END "
                               "with YYYY-MM or YYYY-MM-DD ends, e.g. "
                               "livecodebench:2024-08..2025-02") from None


def contest_time(row: Mapping[str, Any]) -> dt.datetime:
    """A row's `contest_date` as LiveCodeBench reads it (`datetime.fromisoformat`); one with a
    time zone is taken in UTC."""
    value = row.get("contest_date")
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day)
    else:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when


def in_window(window: Window) -> Callable[[Mapping[str, Any]], bool]:
    return lambda row: contest_time(row) in window


def lcb_row(row: Mapping[str, Any], task: str) -> Sample:
    question = text_of(row, "question_content")
    meta = metadata_of(row)
    public = json.loads(row.get("public_test_cases") or "[]")
    private = decode_private(row.get("private_test_cases") or "[]")
    tests = with_public(bench_tests(public + private, meta, "public_test_cases",
                                    prelude=IMPORTS), len(public))  # public first, then private
    return Sample(id=str(row["question_id"]), task=task,
                  prompt=code_prompt(question, str(row.get("starter_code") or ""), tests),
                  tests=tests,
                  meta={"problem": question, "starter_code": str(row.get("starter_code") or ""),
                        "title": row.get("question_title"),
                        "platform": row.get("platform"), "difficulty": row.get("difficulty"),
                        "contest_date": contest_time(row).isoformat(), "public_tests": len(public),
                        "private_tests": len(private)})


LIVECODEBENCH = register_benchmark(Benchmark(
    name="livecodebench", kind="code", size=1055, to_sample=lcb_row, options=OPTIONS,
    source=HubSource("livecodebench/code_generation_lite", files=RELEASE_FILES,
                     revision="0fe84c3912ea0c4d4a78037083943e8f0c4dd505"),
    grading="every public + private test passes, compared as LiveCodeBench's harness does "
            "(stdin: lines, then Decimal tokens; functional: Solution().<func_name> ==)"))


@register_task_prefix("livecodebench", description="LiveCodeBench problems whose contest_date "
                      "is inside a window, e.g. livecodebench:2024-08..2025-02; the whole set "
                      "holds DeepCoder's lcbv5 training problems (hub "
                      f"{LIVECODEBENCH.source.repo})")
def livecodebench_window(window: str) -> HubTask:
    """`livecodebench:START..END`: the release_v6 problems of that window only."""
    cut = parse_window(window)
    return HubTask(LIVECODEBENCH, name=f"livecodebench:{window}",
                   keep=in_window(cut), label=cut.describe())
