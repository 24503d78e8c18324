"""The verifiers adapter's scalerl side: a runner's episode record -> a token-exact `Played`, and
the loud failures (no venv, a runner that dies, a taskset that cannot load).

The record tests build the runner's JSON by hand (what envs/adapters/verifiers_runner.py sends:
the branch's nodes and the server's replies per call). The runner tests start real processes: a
stand-in runner (a shell script that says ready, then dies on the first request) and, when
`make install` has built `.venv-verifiers`, the real runner on a taskset written here (~5 s per
start: verifiers' imports).
"""

import copy
import textwrap

import pytest

from scalerl.envs.adapters.verifiers import VerifiersEnvironment, VerifiersTask, task_data
from scalerl.envs.adapters.verifiers_process import missing_runner
from scalerl.envs.adapters.verifiers_trace import (
    Segment,
    TraceError,
    played_from_record,
    prompt_digest,
)
from scalerl.envs.base import Sample
from scalerl.envs.spec import environment_from_spec, read_spec

SEQ = [10, 11, 12, 13, 20, 21, 22, 30, 31, 32, 23, 24]
"""user [10 11 12], assistant [13 | 20 21 22], tool [30 31], assistant [32 | 23 24]."""


def record(**changes) -> dict:
    """A two-turn episode as the runner reports it (one tool observation between the turns)."""
    rec = {
        "traces": 1, "ok": True, "errors": [], "timeout": False, "stop": "agent_completed",
        "branches": 1, "rewards": {"exact": 1.0}, "metrics": {"turns": 2.0},
        "nodes": [
            {"role": "user", "text": "q", "token_ids": [10, 11, 12], "mask": [False] * 3},
            {"role": "assistant", "text": "a", "token_ids": [13, 20, 21, 22],
             "mask": [False, True, True, True]},
            {"role": "tool", "text": "o", "token_ids": [30, 31], "mask": [False, False]},
            {"role": "assistant", "text": "b", "token_ids": [32, 23, 24],
             "mask": [False, True, True]}],
        "calls": [
            {"prompt_len": 4, "prompt_digest": prompt_digest(SEQ[:4]), "token_ids": [20, 21, 22],
             "logprobs": [-0.1, -0.2, -0.3], "finish_reason": "stop",
             "versions": [{"version": "4", "start": 0, "end": 3}]},
            {"prompt_len": 10, "prompt_digest": prompt_digest(SEQ[:10]), "token_ids": [23, 24],
             "logprobs": [-0.4, -0.5], "finish_reason": "stop",
             "versions": [{"version": "4", "start": 0, "end": 1},
                          {"version": "5", "start": 1, "end": 2}]}]}
    rec.update(changes)
    return rec


def test_a_two_turn_trace_is_the_prompt_then_sampled_and_environment_tokens():
    played = played_from_record(record())
    assert played.prompt == (10, 11, 12, 13)
    assert played.tokens == tuple(SEQ[4:])
    assert played.logprobs == (-0.1, -0.2, -0.3, None, None, None, -0.4, -0.5)
    # the server's label per sampled token; environment tokens take the version before them
    assert played.versions == (4, 4, 4, 4, 4, 4, 4, 5)
    assert played.segments == (Segment("assistant", 0, 3, True), Segment("tool", 3, 6, False),
                               Segment("assistant", 6, 8, True))
    assert (played.finish, played.ended) == ("stop", "agent_completed")
    assert played.score.status == "correct" and played.score.reward == 1.0
    assert played.meta["verifiers_rewards"] == {"exact": 1.0}


def test_a_call_cut_at_its_token_limit_or_a_verifiers_limit_is_truncated():
    rec = record()
    rec["calls"][-1]["finish_reason"] = "length"
    assert played_from_record(rec).finish == "truncated"
    assert played_from_record(record(stop="max_turns")).finish == "truncated"


def test_the_tasksets_reward_is_mapped_through_reward_range():
    score = played_from_record(record(rewards={"a": 2.0, "b": 1.0}), (0.0, 10.0)).score
    assert (score.status, score.reward) == ("wrong", pytest.approx(0.3))
    assert "a=2, b=1" in score.detail
    assert played_from_record(record(rewards={"a": 3.0})).score.status == "error"  # off range
    assert played_from_record(record(rewards={})).score is None  # no reward: the judge's turn


def _mutate(path, value):
    def apply(rec):
        target = rec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return rec
    return apply


BROKEN = {
    "episode error": (_mutate(["errors"], ["HarnessError: harness 'null' exited 1"]),
                      "verifiers episode failed: HarnessError"),
    "not ok": (_mutate(["ok"], False), "not ok"),
    "deadline": (_mutate(["timeout"], True), "deadline expired"),
    "two agents": (_mutate(["traces"], 2), "2 trainable traces"),
    "compacted": (_mutate(["branches"], 2), "2 trainable branches"),
    "unscored": (_mutate(["rewards"], {"exact": None}), "did not score"),
    "other tokens": (_mutate(["calls", 1, "token_ids"], [23, 99]), "differ from the tokens"),
    "re-rendered": (_mutate(["calls", 1, "prompt_digest"], "0" * 32), "re-rendered"),
    "foreign version": (_mutate(["calls", 0, "versions"], [{"version": "default", "start": 0,
                                                           "end": 3}]), "not a policy version"),
    "short spans": (_mutate(["calls", 0, "versions"], [{"version": "4", "start": 0, "end": 2}]),
                    "cover 2 of its 3"),
    "lost call": (_mutate(["calls"], record()["calls"][:1]), "5 sampled tokens"),
    "bad mask": (_mutate(["nodes", 2, "mask"], [False]), "a mask of 1"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_failed_or_malformed_episode_is_an_error_never_a_zero_reward(case):
    mutate, said = BROKEN[case]
    with pytest.raises(TraceError, match=said):
        played_from_record(mutate(copy.deepcopy(record())))


def test_a_spec_rows_sample_is_sent_as_the_tasksets_task_data():
    sample = Sample(id="1", task="t", prompt="2+2=", answer="4", meta={"level": 1})
    assert task_data(sample) == {"prompt": "2+2=", "answer": "4", "level": 1}
    own = Sample(id="1", task="t", prompt="x", meta={"verifiers_task": {"prompt": "y", "n": 2}})
    assert task_data(own) == {"prompt": "y", "n": 2}


def test_a_task_spec_names_a_taskset_with_the_verifiers_key(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"problem": "2+2=", "answer": "4"}\n')
    (tmp_path / "spec.yaml").write_text(
        "tasks:\n  - {name: vf_rows, kind: math, data: rows.jsonl, max_turns: 3,\n"
        "     environment: {verifiers: my_sums, path: /data/ts, reward_range: [0, 2]}}\n")
    [entry] = read_spec(tmp_path / "spec.yaml")
    env = environment_from_spec(entry)
    assert isinstance(env, VerifiersEnvironment) and env.played_elsewhere
    assert env.config["agent"] == {"max_turns": 3} and env.config["path"] == ["/data/ts"]
    assert env.reward_range == (0.0, 2.0)
    with pytest.raises(ValueError, match="max_observation_chars does not apply"):
        environment_from_spec({**entry, "max_observation_chars": 500})


def test_a_missing_venv_is_one_preflight_line_naming_make_install(monkeypatch, tmp_path):
    monkeypatch.setenv("SCALERL_VERIFIERS_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    line = VerifiersEnvironment("anything").preflight()
    assert "make install" in line and "\n" not in line


FAKE_RUNNER = """#!/bin/sh
echo '{"id": 0, "ok": true, "ready": {"verifiers": "stand-in"}}'
read line
echo "stand-in runner: fell over" >&2
exit 3
"""


def test_a_runner_that_dies_mid_episode_fails_it_with_its_exit_code_and_log(monkeypatch,
                                                                             tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_RUNNER)
    fake.chmod(0o755)
    monkeypatch.setenv("SCALERL_VERIFIERS_PYTHON", str(fake))
    env = VerifiersEnvironment("anything")
    assert env.preflight() is None
    _, played = env.play(Sample(id="1", task="t", prompt="2+2="), base_url="http://x", salt="s")
    with pytest.raises(TraceError, match="exited with code 3.*stand-in runner: fell over"):
        played.result(30)
    env.close_runner()
    env.process.log_path.unlink()  # a failed runner's log is kept (named in the error)


needs_venv = pytest.mark.skipif(missing_runner() is not None,
                                reason="no .venv-verifiers: run `make install`")
TASKSET = textwrap.dedent('''
    import os
    import verifiers.v1 as vf

    __all__ = ["UnitSums"]


    class Data(vf.TaskData):
        answer: str
        crash: bool = False


    class UnitTask(vf.Task[Data]):
        async def setup(self, trace, runtime):
            if self.data.crash:
                os._exit(3)  # the runner process dies mid-episode

        @vf.reward
        async def exact(self, trace: vf.Trace) -> float:
            return float(self.data.answer in (trace.last_reply or ""))


    class UnitSums(vf.Taskset[UnitTask, vf.TasksetConfig]):
        def load(self) -> list[UnitTask]:
            return [UnitTask(Data(idx=i, prompt=f"{i}+{i}=", answer=str(2 * i)),
                             self.config.task) for i in range(5)]
''')


@pytest.fixture
def taskset_dir(tmp_path):
    (tmp_path / "unit_sums.py").write_text(TASKSET)
    return str(tmp_path)


@needs_venv
def test_the_runner_lists_the_tasksets_own_tasks_and_dies_loudly(taskset_dir):
    task = VerifiersTask("vf_unit", "unit_sums", path=taskset_dir, test_fraction=0.0)
    assert task.preflight() is None
    samples = task.samples("train")
    assert sorted(s.prompt for s in samples) == [f"{i}+{i}=" for i in range(5)]
    assert {s.answer for s in samples} == {"0", "2", "4", "6", "8"}
    data = dict(samples[0].meta["verifiers_task"], crash=True)
    _, played = task.environment.play(Sample(id="c", task="vf_unit", prompt="x",
                                             meta={"verifiers_task": data}),
                                      base_url="http://127.0.0.1:9", model="m", salt="s")
    with pytest.raises(TraceError, match="exited with code 3"):
        played.result(120)
    task.environment.close_runner()
    task.environment.process.log_path.unlink()


@needs_venv
def test_a_taskset_that_cannot_load_fails_preflight_in_one_line(tmp_path):
    env = VerifiersEnvironment("no_such_taskset_module", path=str(tmp_path))
    line = env.preflight()
    assert "no_such_taskset_module" in line and "\n" not in line
    env.process.log_path.unlink()
