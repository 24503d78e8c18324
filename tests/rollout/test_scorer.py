"""Streaming scorer: verdicts off the caller's thread, failures as statuses, latency recorded.

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

    def judge(self, sample, completion):
        raise ZeroDivisionError("boom")


class Slow(Task):
    name, kind = "slow", "math"

    def __init__(self):
        self.threads = set()

    def build(self, split):
        return []

    def judge(self, sample, completion):
        self.threads.add(threading.get_ident())
        time.sleep(0.2)
        return Score(status="correct", reward=1.0)


def test_raising_verifier_becomes_an_error_score_through_the_scorer():
    exploding = Exploding()
    with Scorer(max_workers=1, lookup=lambda name: exploding) as scorer:
        score = scorer.score(Sample(id="x", task="exploding", prompt="p"), "c")
        assert scorer.statuses() == {"exploding": {"error": 1}}
    assert score.status == "error" and score.reward == -1.0
    assert score.detail == "task 'exploding': judge raised ZeroDivisionError: boom"


def test_unknown_task_is_an_error_score_not_an_exception():
    with Scorer(max_workers=1) as scorer:
        score = scorer.score(Sample(id="x", task="no-such-task", prompt="p"), "c")
    assert score.status == "error" and "no-such-task" in score.detail


def test_scores_run_concurrently_off_the_caller_thread_and_latency_is_recorded():
    slow = Slow()
    with Scorer(max_workers=4, lookup=lambda name: slow) as scorer:
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
    with Scorer(max_workers=2) as scorer:
        right = scorer.score(sample, f"<think>x</think>\\boxed{{{sample.answer}}}")
        wrong = scorer.score(sample, "<think>x</think>\\boxed{-1}")
    assert right.status == "correct" and wrong.status == "wrong"
