"""The Task base class: build hooks, samples built once under concurrency, the score guard, the
default judge (the kind's verifier with the task's options), and the final methods."""

import threading
import time

import pytest

from scalerl.envs import catalog, kinds
from scalerl.envs.base import Sample, Score
from scalerl.envs.grading import DEFAULT_GRADING, Grading, VerifierConfig
from scalerl.envs.task import Task
from scalerl.sandbox.config import SandboxConfig


def one(task: str, i: int = 0) -> Sample:
    return Sample(id=f"s{i}", task=task, prompt=f"p{i}", answer=str(i))


@pytest.fixture
def echo_kind(monkeypatch):
    """Kind `echo`: correct iff completion == answer; records the options it was given."""
    catalog.task_names()
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    seen = []

    def score(sample, completion, options, grading):
        seen.append((dict(options), grading))
        return Score("correct" if completion == sample.answer else "wrong")

    kinds.register_kind(kinds.Kind("echo", score, "answer", ""), replace=True)
    return seen


class Counted(Task):
    """Builds each split once per instance, slowly, counting the builds."""

    name, kind = "counted", "echo"

    def __init__(self):
        self.builds = []

    def build(self, split):
        self.builds.append(split)
        time.sleep(0.05)  # long enough for the other threads to arrive while building
        return [one(self.name, i) for i in range(3)]


def test_samples_are_built_once_even_when_threads_ask_at_once():
    task = Counted()
    out = []
    threads = [threading.Thread(target=lambda: out.append(task.samples("train")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(task.builds) == ["test", "train"]  # every split once, nothing twice
    assert len(out) == 8 and all(o is out[0] for o in out) and isinstance(out[0], tuple)


def test_unknown_split_is_one_line_naming_the_valid_ones():
    with pytest.raises(ValueError, match="^task 'counted' has no split 'val'; valid: train, test$"):
        Counted().samples("val")


def test_build_splits_makes_the_splits_together_and_must_give_every_split():
    class Together(Task):
        name, splits = "together", ("train", "val", "test")

        def build_splits(self):
            return {"train": [one(self.name, 1)], "test": [one(self.name, 2)]}

    with pytest.raises(ValueError, match="^task 'together': build_splits\\(\\) gave no val split"):
        Together().samples("train")  # every split is built at once, so any split fails
    Together.splits = ("train", "test")
    assert Together().samples("test") == (one("together", 2),)


def test_default_judge_is_the_kinds_verifier_with_thinking_flag_and_options(echo_kind):
    class Opts(Counted):
        requires_thinking = True
        options = {"boxed_only": True}

    task = Opts()
    sample = task.samples("test")[1]
    grading = Grading(SandboxConfig(backend="process"), VerifierConfig(math_workers=2))
    assert task.score(sample, "1", grading).correct and task.score(sample, "2").status == "wrong"
    options = {"requires_thinking": True, "boxed_only": True}
    assert echo_kind == [(options, grading), (options, DEFAULT_GRADING)]


def test_a_judge_that_raises_or_returns_no_score_is_an_error_verdict():
    class Raises(Counted):
        name = "raises"

        def judge(self, sample, completion, grading):
            raise ZeroDivisionError("boom")

    class ReturnsFloat(Counted):
        name = "floaty"

        def judge(self, sample, completion, grading):
            return 1.0

    raised = Raises().score(one("raises"), "c")
    assert raised.status == "error"
    assert raised.detail == "task 'raises': judge raised ZeroDivisionError: boom"
    floaty = ReturnsFloat().score(one("floaty"), "c")
    assert floaty.status == "error" and "judge returned float, not a Score" in floaty.detail


def test_an_unknown_kind_is_an_error_verdict_not_an_exception():
    class NoKind(Counted):
        kind = "chess"

    s = NoKind().score(one("counted"), "c")
    assert s.status == "error" and "unknown task kind 'chess'" in s.detail


def test_overriding_score_or_samples_is_refused_with_the_hook_to_use():
    with pytest.raises(TypeError, match=r"^Bad: override judge\(\), not score\(\)$"):
        class Bad(Task):
            def score(self, sample, completion):
                return Score("correct", 1.0)
    with pytest.raises(TypeError, match=r"^Bad2: override build\(\), not samples\(\)$"):
        class Bad2(Task):
            def samples(self, split):
                return ()


def test_a_task_with_neither_build_hook_cannot_be_made():
    class Empty(Task):
        kind = "math"

    with pytest.raises(TypeError, match=r"Empty must override build\(split\) or build_splits\(\)"):
        Empty()
