"""How many of a benchmark's problems also appear in training data: exact and 13-gram overlap.

A benchmark problem counts as `exact` when its normalised prompt (envs/data.py, the identity the
splits deduplicate by) hashes the same as a training problem's, and as `ngram` when it shares at
least one run of 13 words with one (the GPT-3 paper's contamination test; problems shorter than
13 words are matched exactly only). The problem text is a sample's `meta["problem"]` when the
task templates its prompt (code benchmarks), else its prompt. `overlap` compares two sample
lists; `report` does it for every benchmark against every training task, as `scalerl eval`,
`scalerl tasks overlap` and the start-up of `scalerl train` print it. Nothing here loads data.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scalerl.envs.base import Sample
from scalerl.envs.data import normalize_prompt, prompt_key

NGRAM = 13
"""Words in a shared run that counts as overlap."""
_WORD = re.compile(r"\w+")


def problem_text(sample: Sample) -> str:
    text = sample.meta.get("problem") if isinstance(sample.meta, Mapping) else None
    if isinstance(text, str) and text.strip():
        return text
    return sample.prompt if isinstance(sample.prompt, str) else normalize_prompt(sample.prompt)


def _grams(text: str, n: int = NGRAM) -> set[bytes]:
    words = _WORD.findall(normalize_prompt(text))
    return {hashlib.blake2b(" ".join(words[i:i + n]).encode(), digest_size=8).digest()
            for i in range(len(words) - n + 1)}


@dataclass(frozen=True)
class Overlap:
    """One benchmark against some training data."""

    problems: int
    """Problems of the benchmark checked."""
    exact: int
    """Problems whose normalised prompt is also a training prompt."""
    ngram: int
    """Problems sharing a 13-word run with a training prompt (exact copies included)."""
    contaminated: int
    """Problems counted by either test."""
    examples: tuple[str, ...] = ()
    """Ids of some contaminated problems (at most 5)."""

    def to_dict(self) -> dict:
        return {"problems": self.problems, "exact": self.exact, f"ngram{NGRAM}": self.ngram,
                "contaminated": self.contaminated, "examples": list(self.examples)}

    def describe(self) -> str:
        return (f"{self.contaminated} of {self.problems} problems ({self.exact} same prompt, "
                f"{self.ngram} sharing a {NGRAM}-word run)")


class _Index:
    """A benchmark's problems by prompt hash and by 13-gram, built once."""

    def __init__(self, benchmark: Sequence[Sample]) -> None:
        self.ids = [s.id for s in benchmark]
        texts = [problem_text(s) for s in benchmark]
        self.keys = {prompt_key(t): i for i, t in enumerate(texts)}
        self.owners: dict[bytes, list[int]] = defaultdict(list)
        for i, text in enumerate(texts):
            for gram in _grams(text):
                self.owners[gram].append(i)

    def hits(self, train: Iterable[Sample]) -> tuple[set[int], set[int]]:
        """(problems with the same prompt, problems sharing a 13-gram) in `train`."""
        exact: set[int] = set()
        ngram: set[int] = set()
        for sample in train:
            text = problem_text(sample)
            hit = self.keys.get(prompt_key(text))
            if hit is not None:
                exact.add(hit)
            if self.owners:
                for gram in _grams(text):
                    ngram.update(self.owners.get(gram, ()))
        return exact, ngram

    def overlap(self, exact: set[int], ngram: set[int]) -> Overlap:
        both = sorted(exact | ngram)
        return Overlap(problems=len(self.ids), exact=len(exact), ngram=len(ngram),
                       contaminated=len(both), examples=tuple(self.ids[i] for i in both[:5]))


def overlap(benchmark: Sequence[Sample], train: Iterable[Sample]) -> Overlap:
    """How many of `benchmark`'s problems appear in `train` (streamed once)."""
    index = _Index(benchmark)
    return index.overlap(*index.hits(train))


def report(benchmarks: Mapping[str, Sequence[Sample]],
           train: Mapping[str, Sequence[Sample]]) -> dict[str, dict]:
    """Per benchmark: its overlap with all training tasks together, and with each of them
    (each training task streamed once per benchmark)."""
    out = {}
    for name, samples in benchmarks.items():
        index = _Index(samples)
        per_task = {t: index.hits(s) for t, s in train.items()}
        exact = set().union(*(e for e, _ in per_task.values()))
        ngram = set().union(*(g for _, g in per_task.values()))
        row = index.overlap(exact, ngram).to_dict()
        row["train_tasks"] = {t: index.overlap(*h).to_dict() for t, h in per_task.items()}
        out[name] = row
    return out


def warnings(result: Mapping[str, dict]) -> list[str]:
    """One line per benchmark the training data holds problems of (nothing when clean)."""
    lines = []
    for bench, row in result.items():
        for task, hit in row["train_tasks"].items():
            if hit["contaminated"]:
                lines.append(f"warning: training task {task} holds {hit['contaminated']} of "
                             f"{bench}'s {hit['problems']} problems ({hit['exact']} same prompt, "
                             f"{hit[f'ngram{NGRAM}']} sharing a {NGRAM}-word run; e.g. "
                             f"{', '.join(hit['examples'][:3])})")
    return lines
