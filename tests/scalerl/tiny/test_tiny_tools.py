"""The tiny model's tool-use warm start: traces token-exact in the `plain` convention, the SFT
mask on exactly the assistant tokens, the default model's recipe unchanged, the `tiny-tools`
variant's data, the traced output equal to a real sandbox session's, and (slow) a small build
played with the tool. Expected values are written out by hand."""

from collections import Counter
from dataclasses import replace

import pytest

import scalerl.tiny as T
from scalerl.envs.catalog import get_task
from scalerl.envs.tool_format import tool_format
from scalerl.tiny.tools import direct_answer, program_output, segment_ids, tool_trace
from scalerl.trainer.sft import SFTConfig

DEFAULT_HASH = "998993bc8caef4c2"
"""The default tiny model's recipe hash before the tool fields were added (its cache dir)."""


@pytest.fixture(scope="module")
def tok():
    return T.build_tokenizer()


@pytest.fixture(scope="module")
def train():
    return get_task("arith_tool").samples("train")


def _sample(train, level):
    return next(s for s in train if s.meta["level"] == level)


def test_default_recipe_hash_is_unchanged():
    recipe = T.TinyRecipe()
    assert T.recipe_hash(recipe, T.warm_start_texts(recipe)) == DEFAULT_HASH
    assert T.tiny_recipe("tiny") == recipe


def test_tools_variant_has_its_own_hash_and_setting_a_tool_field_changes_it():
    base = T.TinyRecipe(tasks=(("arith", 8),))
    pairs = T.warm_start_texts(base)
    assert T.recipe_hash(replace(base, direct_frac=0.5), pairs) != T.recipe_hash(base, pairs)
    tools = T.tiny_recipe("tiny-tools")
    assert T.recipe_hash(tools, T.warm_start_texts(tools)) != DEFAULT_HASH


def test_model_names_agree_and_unknown_names_are_refused():
    from scalerl.models import TINY_MODELS

    assert tuple(T.TINY_MODELS) == TINY_MODELS == ("tiny", "tiny-tools")
    with pytest.raises(ValueError, match="unknown tiny model 'tiny-x'; known: tiny, tiny-tools"):
        T.tiny_recipe("tiny-x")
    with pytest.raises(ValueError, match=r"direct_frac must be in \[0, 1\], got 1.5"):
        T.TinyRecipe(direct_frac=1.5)


def test_trace_segments_by_hand(train, tok):
    s = _sample(train, "mul4")
    a, b = s.prompt[:-1].split("*")
    product = str(int(a) * int(b))
    assert tool_trace(s, tok) == (
        (f"```python\nprint({a} * {b})\n```\n```output", True),
        (f"\n{product}\n```\n", False),
        (f"\\boxed{{{product}}}", True),
    )
    d = _sample(train, "div4")
    n, m = d.prompt[:-1].split("/")
    assert tool_trace(d, tok)[1] == (f"\n{int(n) // int(m)}\n```\n", False)
    assert direct_answer(s) == ((f"\\boxed{{{product}}}", True),)


def test_trace_tokens_are_what_the_generator_appends(train, tok):
    """Sampled text tokens, then encode(delta_text) of the observation alone, then the final
    turn and EOS; the whole reads as the task's own worked trace."""
    fmt = tool_format("plain")
    for level in ("mul6", "div3"):
        s = _sample(train, level)
        (turn1, _), (obs, _), (turn2, _) = tool_trace(s, tok)
        assert turn1.endswith(fmt.stop[0]) and fmt.parse(turn1)[0].code.strip() == s.meta["code"]
        ids, mask = segment_ids(tok, tool_trace(s, tok), tok.eos_token_id)
        enc = [tok.encode(t, add_special_tokens=False) for t in (turn1, obs, turn2)]
        assert list(ids) == enc[0] + enc[1] + enc[2] + [tok.eos_token_id]
        assert tok.decode(ids) == s.meta["solution"] + T.EOS
        # the SFT mask is False on exactly the observation's tokens
        assert list(mask) == ([True] * len(enc[0]) + [False] * len(enc[1])
                              + [True] * (len(enc[2]) + 1))
        example = T.sft_example(tok, s.messages(), tool_trace(s, tok))
        untrained = [t for t, m in zip(example.completion_ids, example.trained(), strict=True)
                     if not m]
        assert tok.decode(untrained) == obs


def test_plain_solution_examples_are_built_as_before(tok):
    msgs = [{"role": "user", "content": "1+2="}]
    ex = T.sft_example(tok, msgs, "\\boxed{3}")
    assert ex.completion_mask is None
    assert tok.decode(ex.prompt_ids) == "Q:1+2=\nA:"
    assert tok.decode(ex.completion_ids) == "\\boxed{3}" + T.EOS


def test_tools_variant_data_spans_every_level_with_a_fifth_direct():
    recipe = T.tiny_recipe("tiny-tools")
    default = T.warm_start_texts(T.TinyRecipe())
    pairs = T.warm_start_texts(recipe)
    assert pairs[: len(default)] == default  # the default's data, then the tool problems
    extra = pairs[len(default):]
    assert len(extra) == 2000
    levels = Counter(("*" in m[-1]["content"]) for m, _ in extra)
    assert levels == {True: 1200, False: 800}  # mul4, mul5, mul6 / div3, div4: 400 each
    direct = sum(len(sol) == 1 for _, sol in extra)
    # Bernoulli(0.2) over 2,000: sd 17.9, so +-90 is 5 sigma
    assert abs(direct - 400) < 90, direct
    assert {len(sol) for _, sol in extra} == {1, 3}


def test_only_the_tasks_own_programs_are_traced():
    assert program_output("print(123 * 45)") == "5535\n"
    assert program_output("print(1000 // 7)") == "142\n"
    with pytest.raises(ValueError, match="is not print"):
        program_output("import os; print(1)")


@pytest.mark.bwrap
def test_traced_output_is_a_real_sessions(train, tok):
    """The observation a trace shows is what the sandboxed interpreter prints for its program."""
    from scalerl.envs.environment import EnvContext
    from scalerl.sandbox.config import SandboxConfig
    from scalerl.sandbox.session import SessionPool

    task = get_task("arith_tool")
    fmt = tool_format("plain")
    with SessionPool(SandboxConfig(backend="bwrap"), warm=1) as pool:
        for level in ("mul5", "div4"):
            s = _sample(train, level)
            (turn1, _), (obs, _), _ = tool_trace(s, tok)
            state = task.environment.start(s, EnvContext(sessions=pool, tool_format=fmt))
            try:
                reply = task.environment.step(
                    s, [*s.messages(), {"role": "assistant", "content": turn1}], state)
            finally:
                task.environment.close(state)
            assert [o.status for o in reply.outcomes] == ["ok"]
            assert fmt.delta_text(tok, reply.messages, turn1) == obs


@pytest.mark.slow
@pytest.mark.bwrap
def test_small_tools_build_plays_episodes_with_the_tool(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scalerl.sandbox.config import SandboxConfig
    from scalerl.sandbox.session import SessionPool
    from scalerl.tiny.tools import tool_pass_rate

    small = T.TinyRecipe(tasks=(("arith", 16),), tool_tasks=(("arith_tool", 40),),
                         direct_frac=0.25, sft=SFTConfig(steps=3, batch_size=8),
                         check_tasks=("arith_tool",), check_limit=4)
    path = T.ensure_tiny(small, out=tmp_path / "m", log=lambda m: None)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    with SessionPool(SandboxConfig(backend="bwrap"), warm=1) as pool:
        out = tool_pass_rate(model, tokenizer, "arith_tool", pool, limit=4, max_new_tokens=24)
    assert 0.0 <= out["pass1"] <= 1.0 and out["tool_calls_mean"] >= 0.0


@pytest.mark.parametrize(("argv", "says"), [
    (["--model", "nope"], "--model 'nope': expected one of tiny, tiny-tools"),
    (["--check-tools", "--limit", "0"], "--limit must be >= 1, got 0"),
])
def test_scalerl_tiny_refuses_bad_input_in_one_line(capsys, argv, says):
    from scalerl.cli import main

    assert main(["tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
