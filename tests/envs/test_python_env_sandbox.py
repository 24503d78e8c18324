"""The python environment through the real SessionPool in bwrap: an arith_tool episode whose
calls really run sandboxed (a variable kept between turns, a traceback and a host file the code
cannot read shown as observations), in both tool formats, and its session killed on close."""

from __future__ import annotations

import json

import pytest

from scalerl.envs.catalog import get_task
from scalerl.envs.environment import EnvContext
from scalerl.envs.tool_format import tool_format
from scalerl.sandbox import backend_problem
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.session import SessionLimits, SessionPool

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def pool():
    problem = backend_problem("bwrap")
    if problem:  # CI installs bwrap; a machine without it says why
        pytest.skip(f"bwrap unavailable here: {problem}")
    with SessionPool(SandboxConfig(backend="bwrap"), SessionLimits(call_s=5.0), warm=1) as p:
        yield p


def _turn(transcript: list, text: str) -> list:
    return [*transcript, {"role": "assistant", "content": text}]


def test_a_plain_episode_runs_sandboxed_and_keeps_variables_between_turns(pool, tmp_path):
    task = get_task("arith_tool")
    env, sample = task.environment, task.samples("test")[0]
    a, b = sample.prompt[:-1].split("*")
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    state = env.start(sample, EnvContext(sessions=pool, tool_format=tool_format("plain")))
    try:
        history = [{"role": "user", "content": sample.prompt}]
        first = env.step(sample, _turn(history, f"```python\nx = {a} * {b}\nprint(x)\n```\n"
                                                 "```output"), state)
        assert [o.status for o in first.outcomes] == ["ok"]
        assert first.messages[0]["content"] == sample.answer
        second = env.step(sample, _turn(history, "```python\nprint(x == int('"
                                                 f"{sample.answer}'))\nopen({str(secret)!r})"
                                                 ".read()\n```\n```output"), state)
        (outcome,) = second.outcomes
        assert outcome.status == "error" and outcome.output.startswith("True\n")
        assert "FileNotFoundError" in outcome.output and "host data" not in outcome.output
        final = env.step(sample, _turn(history, f"\\boxed{{{sample.answer}}}"), state)
        assert final.done
        session = state.session
        assert session.alive
    finally:
        env.close(state)
    assert not session.alive


def test_a_chat_call_runs_in_the_sandbox_and_a_timeout_is_an_observation(pool):
    task = get_task("arith_tool")
    env, sample = task.environment, task.samples("test")[1]
    state = env.start(sample, EnvContext(sessions=pool, tool_format=tool_format("chat")))
    codes = ("print(sum(range(10)))", "while True:\n    pass")
    calls = "".join("<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": c}})
                    + "\n</tool_call>\n" for c in codes)
    try:
        reply = env.step(sample, [{"role": "user", "content": sample.prompt},
                                  {"role": "assistant", "content": calls}], state)
    finally:
        env.close(state)
    assert [o.status for o in reply.outcomes] == ["ok", "timeout"]
    assert reply.outcomes[0].output.strip() == "45"
    assert [m["role"] for m in reply.messages] == ["tool", "tool"]
    assert "timed out" in reply.outcomes[1].output
