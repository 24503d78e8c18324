"""Tools as typed Python callables (envs/tools.py) and the environments that offer them
(envs/tool_env.py, envs/adapters/trl.py), played by the turn rule every loop uses (envs/turns.py)
with the real `chat` format: schemas from signatures and docstrings, arguments checked against
them, guarded calls (time limit, output cap, exceptions), one object per rollout, TRL's
`reset`/`get_reward` contract, and the spec keys that register them."""

from __future__ import annotations

import json
import re
import threading

import pytest
import user_tools

from scalerl.envs.base import Sample
from scalerl.envs.environment import EnvContext
from scalerl.envs.spec import environment_from_spec
from scalerl.envs.tool_env import ToolEnvironment, credit_score
from scalerl.envs.tool_format import tool_format
from scalerl.envs.tools import PYTHON, ToolError, call_tool, load_tool, tool
from scalerl.envs.turns import EnvFailed, Play, prompt_with_opening

CHAT = EnvContext(tool_format=tool_format("chat"))
SAMPLE = Sample(id="s1", task="capitals", prompt="What is the capital of France?",
                answer="37")


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def answer(play: Play, text: str, turn: int = 0):
    transcript = [*SAMPLE.messages(), {"role": "assistant", "content": text}]
    return play.answer(transcript, turn)


# --- schemas and argument checks ---------------------------------------------------------------
def test_a_typed_documented_function_is_a_tool_with_its_schema():
    t = tool(user_tools.lookup)
    assert t.schema() == {"type": "function", "function": {
        "name": "lookup", "description": "Look up a country's capital.",
        "parameters": {"type": "object", "properties": {
            "country": {"type": "string", "description": "the country's name, in English"},
            "upper": {"type": "boolean", "description": "write the answer in capitals"}},
            "required": ["country"], "additionalProperties": False}}}
    assert load_tool("user_tools:lookup") == t and load_tool("python") is PYTHON


@pytest.mark.parametrize(("arguments", "says"), [
    ({}, "'country' is a required property"),
    ({"country": 3}, "country: 3 is not of type 'string'"),
    ({"country": "France", "lang": "fr"}, "Additional properties are not allowed ('lang'"),
])
def test_arguments_that_do_not_fit_the_schema_name_what_is_wrong_and_the_parameters(
        arguments, says):
    problem = tool(user_tools.lookup).problem(arguments)
    assert says in problem
    assert problem.endswith("parameters: country (string, required), upper (boolean)")
    assert tool(user_tools.lookup).problem({"country": "France", "upper": True}) is None


@pytest.mark.parametrize(("ref", "says"), [
    ("bash", "tool 'bash': write it as package.module:name (or a built-in: python)"),
    ("user_tools:nope", "tool 'user_tools:nope': cannot import it (AttributeError"),
    ("json:dumps", "tool dumps: Argument obj is missing a type hint"),  # no schema to read
])
def test_a_tool_that_cannot_be_made_is_one_line(ref, says):
    with pytest.raises(ToolError, match="^" + re.escape(says)) as err:
        load_tool(ref)
    assert "\n" not in str(err.value)


# --- guarded calls ------------------------------------------------------------------------------
def test_a_call_runs_off_the_callers_thread_and_renders_json_results():
    seen = []
    t = tool(user_tools.add)
    t = t.__class__(t.name, t.description, t.parameters,
                    lambda a, b: seen.append(threading.current_thread().name) or {"sum": a + b})
    out = call_tool(t, {"a": 2, "b": 3}, timeout_s=5, max_chars=200)
    assert (out.status, out.output) == ("ok", '{"sum": 5}')
    assert seen and seen[0].startswith("user-tool") and seen[0] != threading.current_thread().name


def test_an_exception_a_timeout_and_a_long_output_are_observations_never_crashes():
    raised = call_tool(tool(user_tools.lookup), {"country": "Atlantis"}, 5, 200)
    assert raised.status == "error" and raised.output == "KeyError: 'atlantis'"
    slow = call_tool(tool(user_tools.nap), {"seconds": 2.0}, timeout_s=0.2, max_chars=200)
    assert (slow.status, slow.output) == ("timeout", "tool 'nap' timed out after 0.2 s")
    assert slow.latency_s == pytest.approx(0.2)
    long = call_tool(tool(user_tools.shout), {"text": "ab"}, 5, max_chars=100)
    assert long.status == "ok" and long.truncated and len(long.output) <= 100
    assert "characters cut" in long.output


# --- function tools in an environment -----------------------------------------------------------
def test_function_tools_answer_json_calls_bad_ones_and_unknown_ones_with_errors():
    env = ToolEnvironment(["user_tools:lookup", user_tools.add])
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["lookup", "add"]
    play = Play(env, SAMPLE, CHAT)
    assert play.start() == ()
    text = (call("lookup", country="France") + call("add", a=1, b="x") + call("wiki", q="x")
            + call("lookup", country="Italy", upper=True))
    got = answer(play, text)
    assert got.ended is None
    statuses = [o.status for o in got.reply.outcomes]
    assert statuses == ["ok", "error", "error", "ok"]
    outputs = [m["content"] for m in got.reply.messages]
    assert outputs[0] == "Paris" and outputs[3] == "ROME"
    assert "b: 'x' is not of type 'integer'" in outputs[1] and "a (integer, required)" in outputs[1]
    assert outputs[2] == "unknown tool 'wiki'; the tools are 'lookup', 'add'"
    assert [m["role"] for m in got.reply.messages] == ["tool"] * 4
    assert answer(play, "The capital is Paris.", 1).ended == "done"  # no call: done
    play.close()


def test_the_plain_format_cannot_write_other_tools_and_says_so_at_start():
    env = ToolEnvironment(["python", "user_tools:lookup"])
    context = EnvContext(tool_format=tool_format("plain"), sessions=object())
    with pytest.raises(EnvFailed, match=re.escape(
            "tool format 'plain' writes only python; task 'capitals' has tools python, lookup: "
            "use tool_format chat")):
        Play(env, SAMPLE, context).start()


# --- one object per rollout ---------------------------------------------------------------------
def test_a_stateful_tool_class_gets_an_instance_per_rollout_released_at_close():
    user_tools.Counter.closed.clear()
    env = user_tools.Counter()
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["bump"]
    first, second = Play(env, SAMPLE, CHAT), Play(env, SAMPLE, CHAT)
    first.start()
    second.start()
    assert answer(first, call("bump", by=3)).reply.messages[0]["content"] == "3"
    assert answer(first, call("bump", by=4), 1).reply.messages[0]["content"] == "7"
    assert answer(second, call("bump", by=1)).reply.messages[0]["content"] == "1"
    verdict = first.verdict("")
    assert (verdict.status, verdict.reward) == ("wrong", 0.7)  # get_reward: 7 of 10
    first.close()
    second.close()
    assert sorted(user_tools.Counter.closed) == [1, 7]


def test_a_trl_style_class_registers_unchanged():
    env = environment_from_spec({"environment": {"class": "user_tools:Game"}, "max_turns": 4})
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["guess"]
    play = Play(env, SAMPLE, CHAT)
    opening = play.start()
    assert opening == ({"role": "user", "content": " Guess a number; the secret is 7 mod 10."},)
    prompt = prompt_with_opening(SAMPLE.messages(), opening)  # appended to the last user turn
    assert prompt == [{"role": "user", "content": "What is the capital of France? Guess a "
                                                  "number; the secret is 7 mod 10."}]
    assert answer(play, call("guess", number=20)).reply.messages[0]["content"] == "higher"
    won = answer(play, call("guess", number=37), 1)
    assert won.ended == "done" and won.reply.outcomes[0].output == "right"  # `done` ends it
    verdict = play.verdict("")
    assert (verdict.status, verdict.reward) == ("correct", 1.0)
    play.close()


def test_a_reward_on_another_scale_maps_through_reward_range_or_is_an_error():
    env = environment_from_spec({"environment": {"class": "user_tools:Scored",
                                                 "reward_range": [0, 20]}})
    play = Play(env, SAMPLE, CHAT)
    assert play.start() == ()  # reset returned None: no opening
    answer(play, call("score_points", n=5))
    assert play.verdict("").reward == 0.25
    answer(play, call("score_points", n=25), 1)
    bad = play.verdict("")
    assert bad.status == "error" and "outside reward_range [0, 20]" in bad.detail
    play.close()


@pytest.mark.parametrize(("value", "status", "credit"), [
    (True, "correct", 1.0), (False, "wrong", 0.0), (0.5, "wrong", 0.5), (1, "correct", 1.0),
    (1.5, "error", None), ("high", "error", None), (float("nan"), "error", None),
])
def test_an_environments_own_reward_as_a_verdict(value, status, credit):
    verdict = credit_score(value)
    assert (verdict.status, verdict.reward) == (status, credit)


# --- specs --------------------------------------------------------------------------------------
def test_spec_tools_mix_built_ins_and_import_paths():
    env = environment_from_spec({"tools": ["python", "user_tools:lookup"], "max_turns": 2})
    assert isinstance(env, ToolEnvironment) and env.max_turns == 2
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["python", "lookup"]
    assert environment_from_spec({"tools": ["python"]}).name == "python"


@pytest.mark.parametrize(("environment", "says"), [
    ({"class": "user_tools:Game", "openenv": "http://x"}, "exactly one of class, openenv, "
                                                          "verifiers"),
    ({"gym": "x"}, "exactly one of class, openenv, verifiers; got keys gym"),
    ({"class": "user_tools:Nope"}, "environment class 'user_tools:Nope': cannot import it"),
    ({"class": "user_tools:Scored", "reward_range": [1, 0]}, "reward_range must be finite with "
                                                             "lo < hi"),
    ({"class": "user_tools:Game", "colour": "red"}, "environment class: "),
])
def test_bad_environment_specs_are_one_line(environment, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        environment_from_spec({"environment": environment})
