"""The built-in math benchmarks and training sets, as the field's hub copies lay them out.

MATH-500, AIME 2024/2025, AMC 2023 and GSM8K (held out) and Polaris-53K and DeepScaleR
(training sets): each row's problem is the prompt as is (the `math` kind's system prompt asks for
a `\\boxed{}` answer) and its gold is read as the reports grade it: MATH's `answer` (else the last
`\\boxed{}` of its `solution`), AIME/AMC integers (`142.0` -> `142`), GSM8K's number after
`#### `. The hub ids, splits and columns were checked against the dataset cards (README table,
docs/benchmarks.md). Graded by math-verify (envs/math/verifier.py); nothing here scores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scalerl.envs.base import Sample
from scalerl.envs.bench.hub import HubSource
from scalerl.envs.bench.task import Benchmark, register_benchmark
from scalerl.envs.data import prompt_key
from scalerl.envs.math import verifier as _math_kind  # noqa: F401 - registers the `math` kind
from scalerl.envs.math.files import last_boxed, read_math_gold

_GSM8K_FINAL = "####"
_INTEGRAL = re.compile(r"^[+-]?\d+(\.0*)?$")


def text_of(row: Mapping[str, Any], *columns: str) -> str:
    """The first of `columns` the row has, as non-empty text; ValueError naming them."""
    for col in columns:
        value = row.get(col)
        if isinstance(value, str) and value.strip():
            return value
    raise ValueError(f"no non-empty text in column {' / '.join(columns)}")


def number_answer(value: Any) -> str:
    """An AIME/AMC answer as text: integral values without a fraction part (`142.0` -> `142`,
    `033` -> `33`); anything else as written."""
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError(f"answer is missing or not a number: {value!r}")
    text = str(value).strip()
    if _INTEGRAL.match(text):
        return str(int(float(text)))
    return text


def gsm8k_answer(answer: str) -> str:
    """The final number of a GSM8K solution: the text after `#### `, thousands separators
    dropped (`#### 1,600` -> `1600`)."""
    if _GSM8K_FINAL not in answer:
        raise ValueError("GSM8K answer has no '#### N' final line")
    final = answer.rsplit(_GSM8K_FINAL, 1)[1].strip().replace(",", "")
    if not final:
        raise ValueError("GSM8K answer's '####' line is empty")
    return final


def _sample(task: str, row: Mapping[str, Any], problem: str, answer: str, *, id_col: str | None,
            solution: str | None = None, **meta: Any) -> Sample:
    raw_id = row.get(id_col) if id_col else None
    sid = str(raw_id) if raw_id not in (None, "") else prompt_key(problem)[:16]
    meta = {"problem": problem, **meta}
    if solution:
        meta["solution"] = solution
    return Sample(id=sid, task=task, prompt=problem, answer=answer, meta=meta)


def math_gold(row: Mapping[str, Any]) -> str:
    """`answer` when the row has one, else the last `\\boxed{}` of `solution` (MATH format);
    ValueError saying which is missing (DeepScaleR has rows with neither)."""
    answer = row.get("answer")
    if answer not in (None, ""):
        return read_math_gold(answer, "answer")
    solution = row.get("solution")
    if not isinstance(solution, str) or not solution.strip():
        raise ValueError("no answer: `answer` empty, no `solution`")
    try:
        return read_math_gold(solution, "solution")
    except ValueError:
        raise ValueError("no answer: `answer` empty, no \\boxed{} in `solution`") from None


def math500_row(row: Mapping[str, Any], task: str) -> Sample:
    problem, solution = text_of(row, "problem"), row.get("solution") or ""
    gold = math_gold(row)
    return _sample(task, row, problem, gold, id_col="unique_id",
                   solution=solution or f"\\boxed{{{gold}}}", subject=row.get("subject"),
                   level=row.get("level"), solution_boxed=last_boxed(solution))


def competition_row(row: Mapping[str, Any], task: str) -> Sample:
    """AIME / AMC: problem (or question) and a numeric answer."""
    problem = text_of(row, "problem", "question")
    gold = number_answer(row.get("answer"))
    return _sample(task, row, problem, gold, id_col="id", solution=f"\\boxed{{{gold}}}",
                   year=row.get("year"), url=row.get("url"))


def gsm8k_row(row: Mapping[str, Any], task: str) -> Sample:
    problem, answer = text_of(row, "question"), text_of(row, "answer")
    gold = gsm8k_answer(answer)
    return _sample(task, row, problem, gold, id_col=None,
                   solution=f"{answer.rsplit(_GSM8K_FINAL, 1)[0].strip()}\n\\boxed{{{gold}}}")


def answer_row(row: Mapping[str, Any], task: str) -> Sample:
    """Polaris / DeepScaleR: problem and answer (raw LaTeX), maybe a solution."""
    problem, gold = text_of(row, "problem"), math_gold(row)
    return _sample(task, row, problem, gold, id_col=None, solution=f"\\boxed{{{gold}}}",
                   difficulty=row.get("difficulty"))


MATH500 = register_benchmark(Benchmark(
    name="math500", kind="math", size=500, to_sample=math500_row,
    source=HubSource("HuggingFaceH4/MATH-500", ((None, "test"),),
                     revision="6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be"),
    grading="math-verify vs `answer` (the last \\boxed{} of the solution)"))
AIME24 = register_benchmark(Benchmark(
    name="aime24", kind="math", size=30, to_sample=competition_row,
    source=HubSource("HuggingFaceH4/aime_2024", ((None, "train"),),
                     revision="2fe88a2f1091d5048c0f36abc874fb997b3dd99a"),
    grading="integer answer 0-999, math-verify"))
AIME25 = register_benchmark(Benchmark(
    name="aime25", kind="math", size=30, to_sample=competition_row,
    source=HubSource("yentinglin/aime_2025", ((None, "train"),),
                     revision="6f71d77b0b89b9dabe07ab466c51df33f514df7f"),
    grading="integer answer 0-999, math-verify"))
AMC23 = register_benchmark(Benchmark(
    name="amc23", kind="math", size=40, to_sample=competition_row,
    source=HubSource("math-ai/amc23", ((None, "test"),),
                     revision="80815d37005feb82cd7f8fbc6901d5d3eff43057"),
    grading="numeric answer, math-verify"))
GSM8K = register_benchmark(Benchmark(
    name="gsm8k", kind="math", size=1319, to_sample=gsm8k_row,
    source=HubSource("openai/gsm8k", (("main", "test"),),
                     revision="740312add88f781978c0658806c59bc2815b9866"),
    grading="the number after `#### ` in `answer`, math-verify"))
POLARIS = register_benchmark(Benchmark(
    name="polaris", kind="math", size=53000, size_exact=False, role="train",
    to_sample=answer_row,
    source=HubSource("POLARIS-Project/Polaris-Dataset-53K", ((None, "train"),),
                     revision="296f8e34132e63f4a1d70e0dcc8bddebb43f03e4"),
    grading="math-verify vs `answer`"))
DEEPSCALER = register_benchmark(Benchmark(
    name="deepscaler", kind="math", size=40315, role="train", to_sample=answer_row,
    source=HubSource("agentica-org/DeepScaleR-Preview-Dataset", ((None, "train"),),
                     revision="b6ae8c60f5c1f2b594e2140b91c49c9ad0949e29"),
    grading="math-verify vs `answer`"))
