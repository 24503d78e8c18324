"""Tool formats: calls parsed from model text, observations, and token-exact deltas on real
tokenizers (the tiny model's, which renders no tools: plain; a Qwen3-style chat tokenizer written
in the hub's schema by qwen3_style_tokenizer.py, since Qwen3's cannot be downloaded here)."""

from __future__ import annotations

import json

import pytest
import qwen3_style_tokenizer

from scalerl.envs.environment import ToolCall, ToolOutcome
from scalerl.envs.tool_format import (
    PYTHON_SCHEMA,
    ChatFormat,
    MalformedCall,
    PlainFormat,
    choose_tool_format,
    python_call,
    renders_tools,
    tool_format,
)

PLAIN, CHAT = PlainFormat(), ChatFormat()


def _call_text(code: str, name: str = "python") -> str:
    return ("<tool_call>\n" + json.dumps({"name": name, "arguments": {"code": code}})
            + "\n</tool_call>")


def _ok(output: str) -> ToolOutcome:
    return ToolOutcome("ok", output, 0.01)


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory):
    from transformers import AutoTokenizer

    path = qwen3_style_tokenizer.build(tmp_path_factory.mktemp("qwen3_style"))
    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def tiny_tok(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


# --- the registry and the choice ---------------------------------------------------------------
def test_registry_knows_both_formats_and_names_them_for_an_unknown_one():
    assert tool_format("plain").stop == ("```output",)
    assert tool_format("chat").template_tools([PYTHON_SCHEMA]) == [PYTHON_SCHEMA]
    assert tool_format("plain").template_tools([PYTHON_SCHEMA]) is None
    assert tool_format("plain").tool_names == ("python",)  # plain writes only the interpreter
    assert tool_format("chat").tool_names is None  # chat writes any tool
    with pytest.raises(KeyError, match="known: chat, plain"):
        tool_format("xml")


def test_auto_picks_chat_for_a_qwen3_template_and_plain_for_the_tiny_one(chat_tok, tiny_tok):
    assert renders_tools(chat_tok) and not renders_tools(tiny_tok)
    assert choose_tool_format("auto", chat_tok).name == "chat"
    assert choose_tool_format("auto", tiny_tok).name == "plain"
    assert choose_tool_format("plain", chat_tok).name == "plain"


def test_chat_on_a_template_without_tools_and_an_unknown_setting_are_refused(tiny_tok):
    with pytest.raises(ValueError, match="does not: use tool_format plain"):
        choose_tool_format("chat", tiny_tok)
    with pytest.raises(ValueError, match="'hermes' is not one of auto, chat, plain"):
        choose_tool_format("hermes", tiny_tok)


# --- plain: parsing ------------------------------------------------------------------------------
def test_plain_turn_ending_in_output_asks_for_its_python_block():
    text = "Let me compute.\n```python\nprint(1234*5678)\n```\n```output"
    assert PLAIN.parse(text) == [python_call("print(1234*5678)\n")]


def test_plain_turn_ending_at_eos_is_final_and_its_code_is_not_run():
    assert PLAIN.parse("```python\nprint(2)\n```\nSo \\boxed{2}.<|endoftext|>") == []
    assert PLAIN.parse("The answer is \\boxed{4}.") == []


def test_plain_runs_every_new_block_in_order_and_accepts_py_and_an_output_closed_block():
    text = "```python\nx = 6\n```\nthen\n```py\ny = x * 7\n```\n```python\nprint(y)\n```output"
    assert [c.code for c in PLAIN.parse(text)] == ["x = 6\n", "y = x * 7\n", "print(y)\n"]


def test_plain_skips_blocks_already_answered_earlier_in_the_message():
    text = ("```python\nprint(1)\n```\n```output\n1\n```\nNow the next step.\n"
            "```python\nprint(2)\n```\n```output")
    assert PLAIN.parse(text) == [python_call("print(2)\n")]


def test_plain_output_without_code_is_a_malformed_call_saying_what_to_write():
    (call,) = PLAIN.parse("I will run it.\n```output")
    assert isinstance(call, MalformedCall) and "```python block" in call.error


def test_plain_observation_and_delta_close_the_output_block():
    calls = [python_call("print(1)"), python_call("print(2)")]
    messages = PLAIN.observation(calls, [_ok("1\n"), _ok("2\n")])
    assert messages == ({"role": "tool", "content": "1\n2"},)
    turn = "```python\nprint(2)\n```\n```output"
    assert PLAIN.delta_text(None, messages, turn) == "\n1\n2\n```\n"
    with pytest.raises(ValueError, match="ends with its stop string"):
        PLAIN.delta_text(None, messages, "done<|endoftext|>")


def test_plain_delta_is_token_exact_on_the_tiny_models_tokenizer(tiny_tok):
    prompt_ids = tiny_tok.apply_chat_template([{"role": "user", "content": "1234*5678="}],
                                              add_generation_prompt=True, tokenize=True,
                                              return_dict=False)
    turn = "```python\nprint(1234*5678)\n```\n```output"
    (call,) = PLAIN.parse(turn)
    messages = PLAIN.observation([call], [_ok("7006652\n")])
    delta = PLAIN.delta_text(tiny_tok, messages, turn)
    ids = (list(prompt_ids) + tiny_tok.encode(turn, add_special_tokens=False)
           + tiny_tok.encode(delta, add_special_tokens=False))
    assert tiny_tok.decode(ids) == ("Q:1234*5678=\nA:```python\nprint(1234*5678)\n```\n"
                                    "```output\n7006652\n```\n")


def test_plain_feedback_user_turn_is_the_tiny_templates_new_turn_token_exact(tiny_tok):
    """Test feedback (a `user` message, envs/code/feedback.py) after a plain-format answer that
    ended at EOS: the template's next user turn and generation prompt, EOS not repeated."""
    conversation = [{"role": "user", "content": "add(a,b)"}]
    ids = list(tiny_tok.apply_chat_template(conversation, add_generation_prompt=True,
                                            tokenize=True, return_dict=False))
    sampled = tiny_tok.encode("def add(a,b): return a-b", add_special_tokens=False)
    sampled.append(tiny_tok.convert_tokens_to_ids("<|endoftext|>"))
    messages = ({"role": "user", "content": "failed: add(1,2)==3"},)
    delta = PLAIN.delta_text(tiny_tok, messages, tiny_tok.decode(sampled,
                                                                 skip_special_tokens=False))
    assert delta == "\nQ:failed: add(1,2)==3\nA:"
    ids += sampled + tiny_tok.encode(delta, add_special_tokens=False)
    full = conversation + [{"role": "assistant", "content": "def add(a,b): return a-b"},
                           *messages]
    assert tiny_tok.decode(ids, skip_special_tokens=False) == tiny_tok.apply_chat_template(
        full, add_generation_prompt=True, tokenize=False)


# --- chat: parsing -------------------------------------------------------------------------------
def test_chat_parses_one_call_per_tool_call_block():
    text = ("<think>\nMultiply.\n</think>\n\n" + _call_text("a = 3\nprint(a * 4)") + "\n"
            + _call_text("print('x')"))
    assert CHAT.parse(text) == [python_call("a = 3\nprint(a * 4)"),
                                python_call("print('x')")]
    assert CHAT.parse("No tool needed: \\boxed{12}") == []


def test_chat_accepts_arguments_written_as_a_json_string():
    body = json.dumps({"name": "python", "arguments": json.dumps({"code": "print(5)"})})
    assert CHAT.parse(f"<tool_call>\n{body}\n</tool_call>") == [python_call("print(5)")]


def test_chat_accepts_a_raw_newline_inside_the_code_string():
    text = '<tool_call>\n{"name": "python", "arguments": {"code": "x = 2\nprint(x)"}}\n</tool_call>'
    assert CHAT.parse(text) == [python_call("x = 2\nprint(x)")]


@pytest.mark.parametrize(("text", "says"), [
    ('<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"\n</tool_call>',
     "not valid JSON"),
    ('<tool_call>\n{"name": "lookup", "arguments": ["k"]}\n</tool_call>',
     "tool call 'lookup': \"arguments\" must be a JSON object"),
    ('<tool_call>\n["python"]\n</tool_call>', 'no "name"'),
    ('<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>', 'no "name"'),
    ('<tool_call>\n{"name": "python", "arguments": {"code": "pri', "is unfinished"),
])
def test_chat_malformed_calls_say_what_is_wrong_and_the_valid_shape(text, says):
    (call,) = CHAT.parse(text)
    assert isinstance(call, MalformedCall)
    assert says in call.error and '{"name": "<tool>", "arguments": {...}}' in call.error
    assert call.raw  # what the model wrote is kept for the record


def test_chat_parses_any_tool_with_any_json_arguments():
    """Which tools exist and what their arguments must be is the environment's check
    (envs/tool_env.py); the format reads the call as written."""
    text = ('<tool_call>\n{"name": "lookup", "arguments": {"key": "paris", "limit": 2, '
            '"filters": {"lang": ["fr"]}}}\n</tool_call>'
            '<tool_call>\n{"name": "python", "arguments": {"source": "x"}}\n</tool_call>'
            '<tool_call>\n{"name": "clock"}\n</tool_call>')
    assert CHAT.parse(text) == [
        ToolCall("lookup", {"key": "paris", "limit": 2, "filters": {"lang": ["fr"]}}),
        ToolCall("python", {"source": "x"}), ToolCall("clock", {})]


HERMES_CASES = [
    "Let me compute.\n" + _call_text("print(1234 * 5678)"),
    _call_text("x = 3") + "\n" + _call_text("print(x ** 2)"),
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(2)"}}\n',  # unclosed, whole
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(\'\u00e9\')"}}\n</tool_call>',
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"\n</tool_call>',  # bad JSON
    "no call at all",
    # other tools, any JSON arguments: nested objects, lists, numbers, booleans, null
    '<tool_call>\n{"name": "lookup", "arguments": {"key": "paris", "limit": 2}}\n</tool_call>'
    '\n<tool_call>\n{"name": "move", "arguments": {"to": [1, 2], "fast": true, '
    '"note": null, "opts": {"depth": 3.5}}}\n</tool_call>',
    '<tool_call>\n{"name": "clock", "arguments": {}}\n</tool_call>',
]


@pytest.mark.parametrize("text", HERMES_CASES)
def test_chat_calls_are_those_vllms_hermes_parser_reads(chat_tok, text):
    """Differential: vLLM's own Hermes parser (what a Qwen3 server runs with
    --tool-call-parser hermes) finds the same calls, or, where it fails, we answer an error."""
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    theirs = Hermes2ProToolParser(chat_tok).extract_tool_calls(text, None)
    ours = CHAT.parse(text)
    if theirs.tools_called:
        assert ours == [ToolCall(c.function.name, json.loads(c.function.arguments))
                        for c in theirs.tool_calls]
    else:
        assert all(isinstance(c, MalformedCall) for c in ours)
        assert bool(ours) == ("<tool_call>" in text)


# --- chat: token-exact deltas on a Qwen3-style template -----------------------------------------
def _render(tok, conversation, **kw):
    return tok.apply_chat_template(conversation, tools=[PYTHON_SCHEMA], tokenize=False,
                                   add_generation_prompt=True, **kw)


def _encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_chat_delta_is_the_hand_written_qwen3_tool_turn(chat_tok):
    turn = _call_text("print(6*7)") + "<|im_end|>"
    messages = CHAT.observation([python_call("print(6*7)")], [_ok("42")])
    assert messages == ({"role": "tool", "content": "42"},)
    assert CHAT.delta_text(chat_tok, messages, turn) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_chat_two_outcomes_share_one_user_turn(chat_tok):
    calls = [python_call("print(1)"), python_call("1/0")]
    outcomes = [_ok("1"), ToolOutcome("error", "ZeroDivisionError: division by zero", 0.0)]
    delta = CHAT.delta_text(chat_tok, CHAT.observation(calls, outcomes), "x<|im_end|>")
    assert delta == ("\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>"
                     "\nZeroDivisionError: division by zero\n</tool_response><|im_end|>\n"
                     "<|im_start|>assistant\n")


def test_chat_feedback_user_turn(chat_tok):
    delta = CHAT.delta_text(chat_tok, ({"role": "user", "content": "2 tests failed"},),
                            "```python\nx = 1\n```<|im_end|>")
    assert delta == "\n<|im_start|>user\n2 tests failed<|im_end|>\n<|im_start|>assistant\n"


def test_chat_turn_cut_before_eos_gets_its_end_of_turn_in_the_delta(chat_tok):
    messages = ({"role": "tool", "content": "7"},)
    assert CHAT.delta_text(chat_tok, messages, _call_text("print(7)")).startswith(
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n7\n")


def test_chat_delta_keeps_the_prompts_thinking_setting(chat_tok):
    messages = ({"role": "tool", "content": "7"},)
    delta = CHAT.delta_text(chat_tok, messages, "x<|im_end|>",
                            template_kwargs={"enable_thinking": False})
    assert delta.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_chat_rollout_of_three_turns_is_token_exact(chat_tok):
    """Prompt tokens + each turn's sampled tokens + each delta's tokens decode to the template's
    rendering of the whole conversation, and (every seam being a special token in Qwen3's
    template) are the very tokens that rendering tokenizes to."""
    conversation = [{"role": "system", "content": "Solve it."},
                    {"role": "user", "content": "Compute 1234*5678 and 99*99."}]
    ids = _encode(chat_tok, _render(chat_tok, conversation))
    eos = chat_tok.convert_tokens_to_ids("<|im_end|>")
    turns = ["<think>\nI will use Python.\n</think>\n\n" + _call_text("x = 1234*5678\nprint(x)"),
             "<think>\nNow the second one.\n</think>\n\n" + _call_text("print(99*99, x)")]
    outputs = ["7006652", "9801 7006652"]
    for turn, output in zip(turns, outputs, strict=True):
        sampled = _encode(chat_tok, turn) + [eos]
        ids += sampled
        calls = CHAT.parse(turn)
        messages = CHAT.observation(calls, [_ok(output)])
        delta = CHAT.delta_text(chat_tok, messages,
                                chat_tok.decode(sampled, skip_special_tokens=False))
        ids += _encode(chat_tok, delta)
        conversation += [{"role": "assistant", "content": turn}, *messages]
    full = _render(chat_tok, conversation)
    assert chat_tok.decode(ids, skip_special_tokens=False) == full
    assert ids == _encode(chat_tok, full)
    assert full.endswith("<tool_response>\n9801 7006652\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n")


def test_chat_delta_needs_messages_and_a_verbatim_assistant_content(chat_tok, tiny_tok):
    with pytest.raises(ValueError, match="at least one message"):
        CHAT.delta_text(chat_tok, (), "x<|im_end|>")
    with pytest.raises(ValueError, match="does not show .tool. messages"):  # tiny drops them
        CHAT.delta_text(tiny_tok, ({"role": "tool", "content": "1"},), "x")


def test_observation_needs_one_outcome_per_call():
    with pytest.raises(ValueError, match="one outcome per call"):
        CHAT.observation([python_call("1")], [])
