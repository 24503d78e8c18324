"""Streaming scorer: the run's tasks and grading, verdicts off the caller's thread, failures as
statuses, latency recorded.

The raising and slow tasks below are stand-ins: a verifier that crashes on purpose cannot be
produced with a real task (real verifiers never raise), and real latency varies too much.
"""

import threading
import time

from scalerl.envs.base import Sample, Score
from scalerl.envs.catalog import get_task
from scalerl.envs.task import Task
from scalerl.rollout.scorer import Scorer


class Exploding(Task):
    name, kind = "exploding", "math"

    def build(self, split):
        return []

    def judge(self, sample, completion, grading):
        raise ZeroDivisionError("boom")


class Slow(Task):
    name, kind = "slow", "math"

    def __init__(self):
        self.threads = set()

    def build(self, split):
        return []

    def judge(self, sample, completion, grading):
        self.threads.add(threading.get_ident())
        time.sleep(0.2)
        return Score(status="correct")


def test_raising_verifier_becomes_an_error_score_through_the_scorer():
    with Scorer([Exploding()], max_workers=1) as scorer:
        score = scorer.score(Sample(id="x", task="exploding", prompt="p"), "c")
        assert scorer.statuses() == {"exploding": {"error": 1}}
    assert score.status == "error"
    assert score.detail == "task 'exploding': judge raised ZeroDivisionError: boom"


def test_a_task_the_run_does_not_hold_is_an_error_score_naming_the_run_s_tasks():
    with Scorer([get_task("arith")], max_workers=1) as scorer:
        score = scorer.score(Sample(id="x", task="synth_code", prompt="p"), "c")
    assert score.status == "error"
    assert score.detail == ("no task for sample 'x': task 'synth_code' is not one of this run's "
                            "tasks: arith")


def test_the_judge_gets_the_run_s_grading_settings():
    from scalerl.envs.grading import Grading, VerifierConfig
    from scalerl.sandbox.config import SandboxConfig

    seen = []

    class Recording(Task):
        name, kind = "recording", "math"

        def build(self, split):
            return []

        def judge(self, sample, completion, grading):
            seen.append(grading)
            return Score("wrong")

    grading = Grading(SandboxConfig(backend="bwrap-cold", memory_mb=64),
                      VerifierConfig(math_workers=1))
    with Scorer([Recording()], grading) as scorer:
        scorer.score(Sample(id="x", task="recording", prompt="p"), "c")
    assert seen == [grading]


def test_scores_run_concurrently_off_the_caller_thread_and_latency_is_recorded():
    slow = Slow()
    with Scorer([slow], max_workers=4) as scorer:
        start = time.perf_counter()
        futures = [scorer.submit(Sample(id=str(i), task="slow", prompt="p"), "c")
                   for i in range(4)]
        submitted = time.perf_counter() - start
        assert all(f.result().status == "correct" for f in futures)
        elapsed = time.perf_counter() - start
        lat = scorer.latency()["slow"]
    assert submitted < 0.1  # submit does not block on the verifier
    assert elapsed < 0.6  # four 0.2 s verdicts overlapped (serial would take 0.8 s)
    assert threading.get_ident() not in slow.threads
    assert lat["n"] == 4 and 0.2 <= lat["p50_s"] <= lat["max_s"]
    assert scorer.statuses() == {"slow": {"correct": 4}}


def test_real_arith_verifier_through_the_scorer():
    task = get_task("arith")
    sample = task.samples("test")[0]
    with Scorer([task], max_workers=2) as scorer:
        right = scorer.score(sample, f"<think>x</think>\\boxed{{{sample.answer}}}")
        wrong = scorer.score(sample, "<think>x</think>\\boxed{-1}")
    assert right.status == "correct" and wrong.status == "wrong"
