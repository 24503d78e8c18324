"""The `python` environment's turn logic, with an in-process session standing in for the sandbox
(what is tested here is parsing, the lazy session, cutting and closing, not the sandbox: the
real SessionPool is exercised in test_python_env_sandbox.py)."""

from __future__ import annotations

import contextlib
import io
import time
import traceback

import pytest

from scalerl.envs.base import Sample
from scalerl.envs.environment import (
    EnvContext,
    SessionFailed,
    ToolOutcome,
    environment_factory,
)
from scalerl.envs.python_env import PythonEnvironment, cut_observation
from scalerl.envs.tool_format import tool_format

SAMPLE = Sample(id="1", task="arith_tool", prompt="1234*5678=", answer="7006652")


class InProcessSession:
    """A persistent namespace run with exec: a notebook in this process (no sandbox at all)."""

    def __init__(self) -> None:
        self.namespace: dict = {}
        self.alive, self.ran = True, []

    def run(self, code: str) -> ToolOutcome:
        self.ran.append(code)
        out, start = io.StringIO(), time.perf_counter()
        status = "ok"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                exec(code, self.namespace)
            except Exception:
                status = "error"
                out.write(traceback.format_exc(limit=0))
        return ToolOutcome(status, out.getvalue(), time.perf_counter() - start)

    def close(self) -> None:
        self.alive = False


class Pool:
    def __init__(self, fail: bool = False) -> None:
        self.sessions: list[InProcessSession] = []
        self.fail = fail

    def acquire(self) -> InProcessSession:
        if self.fail:
            raise SessionFailed("bwrap: cannot start")
        self.sessions.append(InProcessSession())
        return self.sessions[-1]


def _assistant(text: str) -> list[dict]:
    return [{"role": "user", "content": SAMPLE.prompt}, {"role": "assistant", "content": text}]


def _context(pool: Pool, fmt: str = "plain") -> EnvContext:
    return EnvContext(sessions=pool, tool_format=tool_format(fmt))


def test_registered_as_python_with_its_limits_checked():
    env = environment_factory("python")(max_turns=2, max_observation_chars=500)
    assert isinstance(env, PythonEnvironment) and env.max_turns == 2
    with pytest.raises(ValueError, match="max_turns must be an integer >= 1, got 0"):
        PythonEnvironment(max_turns=0)
    with pytest.raises(ValueError, match="max_observation_chars must be an integer >= 64"):
        PythonEnvironment(max_observation_chars=10)


def test_a_turn_without_a_call_ends_the_episode_and_starts_no_session():
    env, pool = PythonEnvironment(), Pool()
    state = env.start(SAMPLE, _context(pool))
    reply = env.step(SAMPLE, _assistant("\\boxed{7006652}"), state)
    assert reply.done and reply.messages == () and reply.calls == ()
    assert pool.sessions == []
    env.close(state)


def test_calls_run_in_one_persistent_session_per_rollout():
    env, pool = PythonEnvironment(), Pool()
    state = env.start(SAMPLE, _context(pool))
    first = env.step(SAMPLE, _assistant("```python\nx = 1234*5678\nprint(x)\n```\n```output"),
                     state)
    assert not first.done and first.messages == ({"role": "tool", "content": "7006652"},)
    assert [o.status for o in first.outcomes] == ["ok"]
    second = env.step(SAMPLE, _assistant("```python\nprint(x + 1)\n```\n```output"), state)
    assert second.outcomes[0].output == "7006653\n"
    assert len(pool.sessions) == 1
    other = env.start(SAMPLE, _context(pool))  # another rollout: its own session
    env.step(SAMPLE, _assistant("```python\nprint(1)\n```\n```output"), other)
    assert len(pool.sessions) == 2
    env.close(state)
    assert not pool.sessions[0].alive and pool.sessions[1].alive
    env.close(state)  # closing twice is harmless
    env.close(other)


def test_code_that_raises_is_an_error_observation_not_an_exception():
    env, pool = PythonEnvironment(), Pool()
    state = env.start(SAMPLE, _context(pool, "chat"))
    text = '<tool_call>\n{"name": "python", "arguments": {"code": "1/0"}}\n</tool_call>'
    reply = env.step(SAMPLE, _assistant(text), state)
    (outcome,) = reply.outcomes
    assert outcome.status == "error" and "ZeroDivisionError" in outcome.output
    assert reply.messages == ({"role": "tool", "content": outcome.output},)


def test_a_malformed_call_is_answered_with_its_error_and_never_run():
    env, pool = PythonEnvironment(), Pool()
    state = env.start(SAMPLE, _context(pool, "chat"))
    text = '<tool_call>\n{"name": "bash", "arguments": {"code": "ls /"}}\n</tool_call>'
    reply = env.step(SAMPLE, _assistant(text), state)
    assert not reply.done and reply.outcomes[0].status == "error"
    assert "unknown tool 'bash'; the tools are 'python'" in reply.messages[0]["content"]
    assert pool.sessions == []


def test_long_output_is_cut_to_the_cap_keeping_head_and_tail():
    env, pool = PythonEnvironment(max_observation_chars=100), Pool()
    state = env.start(SAMPLE, _context(pool))
    reply = env.step(SAMPLE, _assistant("```python\nprint('a' * 500 + 'END')\n```\n```output"),
                     state)
    (outcome,) = reply.outcomes
    assert outcome.truncated and len(outcome.output) <= 100
    assert outcome.output.startswith("aaa") and outcome.output.endswith("END\n")
    assert "characters cut" in outcome.output


def test_cut_observation_by_hand():
    # 200 chars, cap 80: the note "\n...[200 characters cut]...\n" is 28 chars, so 52 are kept,
    # 35 from the head and 17 from the tail, and 148 are cut.
    text = "a" * 100 + "b" * 100
    out, cut = cut_observation(text, 80)
    assert cut and out == "a" * 35 + "\n...[148 characters cut]...\n" + "b" * 17
    assert cut_observation("short", 80) == ("short", False)


def test_a_sandbox_that_cannot_start_raises_session_failed():
    env = PythonEnvironment()
    state = env.start(SAMPLE, _context(Pool(fail=True)))
    with pytest.raises(SessionFailed, match="cannot start"):
        env.step(SAMPLE, _assistant("```python\nprint(1)\n```\n```output"), state)


def test_start_without_a_session_pool_says_the_run_needs_tools_on():
    with pytest.raises(ValueError, match=r"needs EnvContext.sessions: the run must have tools on"):
        PythonEnvironment().start(SAMPLE, EnvContext(tool_format=tool_format("plain")))


def test_step_needs_an_assistant_turn_last():
    env = PythonEnvironment()
    state = env.start(SAMPLE, _context(Pool()))
    with pytest.raises(ValueError, match="ending with an assistant turn"):
        env.step(SAMPLE, [{"role": "user", "content": "hi"}], state)


def test_a_rollout_closed_mid_step_starts_no_new_session():
    """A cancelled rollout's close can run while its step is still running calls: the calls
    left then fail (the rollout is over) instead of acquiring a session nobody would close."""
    env, pool = PythonEnvironment(), Pool()
    state = env.start(SAMPLE, _context(pool))
    closing = InProcessSession()
    closing.run = lambda code: (env.close(state), ToolOutcome("ok", "", 0.0))[1]
    pool.acquire = lambda: closing
    text = "```python\nprint(1)\n```\n```python\nprint(2)\n```\n```output"
    with pytest.raises(SessionFailed, match="the rollout ended"):
        env.step(SAMPLE, _assistant(text), state)
    assert not closing.alive and state.session is None
