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
from scalerl.envs.data import normalize_prompt

NGRAM = 13
"""Words in a shared run that counts as overlap."""
_WORD = re.compile(r"\w+")


def problem_text(sample: Sample) -> str:
    text = sample.meta.get("problem") if isinstance(sample.meta, Mapping) else None
    if isinstance(text, str) and text.strip():
        return text
    return sample.prompt if isinstance(sample.prompt, str) else normalize_prompt(sample.prompt)


def fingerprint(sample: Sample, n: int = NGRAM) -> tuple[str, set[bytes]]:
    """A sample's problem text, normalised once: its prompt key (envs/data.py `prompt_key`) and
    the hashes of its runs of `n` words."""
    norm = normalize_prompt(problem_text(sample))
    words = _WORD.findall(norm)
    grams = {hashlib.blake2b(" ".join(words[i:i + n]).encode(), digest_size=8).digest()
             for i in range(len(words) - n + 1)}
    return hashlib.sha256(norm.encode("utf-8")).hexdigest(), grams


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


Hits = dict[str, tuple[set[int], set[int]]]
"""benchmark -> (its problems with the same prompt, its problems sharing a 13-gram)."""


class _Index:
    """Every benchmark's problems by prompt hash and by 13-gram, built once, so that training
    data is fingerprinted once for all benchmarks."""

    def __init__(self, benchmarks: Mapping[str, Sequence[Sample]]) -> None:
        self.ids = {name: [s.id for s in samples] for name, samples in benchmarks.items()}
        self.keys: dict[str, list[tuple[str, int]]] = defaultdict(list)
        self.owners: dict[bytes, list[tuple[str, int]]] = defaultdict(list)
        for name, samples in benchmarks.items():
            for i, sample in enumerate(samples):
                key, grams = fingerprint(sample)
                self.keys[key].append((name, i))
                for gram in grams:
                    self.owners[gram].append((name, i))

    def hits(self, train: Iterable[Sample]) -> Hits:
        """Per benchmark, its problems found in `train` (streamed once)."""
        out: Hits = {name: (set(), set()) for name in self.ids}
        for sample in train:
            key, grams = fingerprint(sample)
            for name, i in self.keys.get(key, ()):
                out[name][0].add(i)
            for gram in grams:
                for name, i in self.owners.get(gram, ()):
                    out[name][1].add(i)
        return out

    def overlap(self, name: str, exact: set[int], ngram: set[int]) -> Overlap:
        both, ids = sorted(exact | ngram), self.ids[name]
        return Overlap(problems=len(ids), exact=len(exact), ngram=len(ngram),
                       contaminated=len(both), examples=tuple(ids[i] for i in both[:5]))


def overlap(benchmark: Sequence[Sample], train: Iterable[Sample]) -> Overlap:
    """How many of `benchmark`'s problems appear in `train` (streamed once)."""
    index = _Index({"benchmark": benchmark})
    return index.overlap("benchmark", *index.hits(train)["benchmark"])


def report(benchmarks: Mapping[str, Sequence[Sample]],
           train: Mapping[str, Sequence[Sample]]) -> dict[str, dict]:
    """Per benchmark: its overlap with all training tasks together, and with each of them
    (each training task streamed once, for every benchmark at once)."""
    index = _Index(benchmarks)
    per_task = {t: index.hits(s) for t, s in train.items()}
    out = {}
    for name in benchmarks:
        exact = set().union(*(hits[name][0] for hits in per_task.values()))
        ngram = set().union(*(hits[name][1] for hits in per_task.values()))
        row = index.overlap(name, exact, ngram).to_dict()
        row["train_tasks"] = {t: index.overlap(name, *hits[name]).to_dict()
                              for t, hits in per_task.items()}
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


def console_lines(found: Mapping | None) -> list[str]:
    """What `scalerl eval` prints of its check (`found`: the training tasks, those skipped and
    `report`'s rows; None: no training task known)."""
    if found is None:
        return ["contamination: not checked (no training tasks; give --train-tasks NAMES)"]
    lines = [f"contamination: not checked against {line}" for line in found["skipped"]]
    for name, row in found["benchmarks"].items():
        lines.append(f"contamination: {name}: {row['contaminated']} of {row['problems']} "
                     f"problems in {', '.join(found['train_tasks'])} ({row['exact']} same "
                     f"prompt, {row[f'ngram{NGRAM}']} sharing a {NGRAM}-word run)")
    return lines
