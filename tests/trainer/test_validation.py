"""The background validation's mechanics: one at a time, results by step, errors reported."""

import threading

import pytest

from scalerl.trainer.config import FieldError, ValConfig
from scalerl.trainer.validation import BackgroundValidation


class Published:
    """The validation generator's side of publishing: which versions arrived, and what."""

    def __init__(self):
        self.versions: list[tuple[int, list]] = []

    def publish(self, weights, version):
        self.versions.append((version, list(weights)))

    def close(self):
        pass


def test_submit_returns_at_once_and_the_figures_come_back_at_their_step():
    gate = threading.Event()
    published = Published()
    val = BackgroundValidation("the generator", published)

    def evaluate(generator):
        gate.wait(10)
        return {"val/x/pass@1": 0.5, "generator": generator}

    val.submit(3, lambda: iter([("w", 1)]), evaluate)
    assert val.pending == [3] and val.finished() == []  # still running: the trainer went on
    gate.set()
    val.wait(10)
    [result] = val.finished()
    assert (result.step, result.error) == (3, None)
    assert result.metrics == {"val/x/pass@1": 0.5, "generator": "the generator"}
    assert published.versions == [(1, [("w", 1)])]
    assert val.pending == [] and val.finished() == []


def test_a_second_submit_waits_for_the_first_and_weights_none_publishes_nothing():
    published = Published()
    val = BackgroundValidation(None, published)
    order = []
    val.submit(0, None, lambda g: order.append(0) or {"a": 0.0})
    val.submit(2, lambda: iter([("w", 2)]), lambda g: order.append(2) or {"a": 2.0})
    val.wait(10)
    assert order == [0, 2]
    assert [r.step for r in val.finished()] == [0, 2]
    assert [v for v, _ in published.versions] == [1]  # step 0's weights were already there


def test_a_failed_validation_is_reported_not_raised():
    val = BackgroundValidation(None, Published())

    def lost(generator):
        raise RuntimeError("no vLLM server answered")

    val.submit(5, None, lost)
    val.wait(10)
    [result] = val.finished()
    assert result.step == 5 and result.metrics == {}
    assert result.error == "RuntimeError: no vLLM server answered"


def test_val_servers_must_be_urls():
    assert ValConfig(servers=("http://10.0.0.5:8000",)).servers == ("http://10.0.0.5:8000",)
    with pytest.raises(FieldError, match="servers"):
        ValConfig(servers=("localhost:8000",))


def test_validation_is_bounded_only_beside_streaming_training_on_the_same_generator():
    from types import SimpleNamespace

    from scalerl.rollout.admission import Lane
    from scalerl.trainer.pipeline_source import PipelineSource
    from scalerl.trainer.sources import PPOOffPolicy
    from scalerl.trainer.validation import validation_lane

    def run(source, share=0.25):
        return SimpleNamespace(generator="training", source=source,
                               cfg=SimpleNamespace(val=ValConfig(engine_share=share)))

    pipeline = SimpleNamespace(streams=PipelineSource.streams)
    assert validation_lane(run(pipeline), "training") == Lane("validation", 0.25)
    assert validation_lane(run(pipeline), "val.servers' own") is None  # its own engines
    assert validation_lane(run(SimpleNamespace(streams=PPOOffPolicy.streams)), "training") is None
    assert validation_lane(run(pipeline, share=1.0), "training") is None  # no bound
