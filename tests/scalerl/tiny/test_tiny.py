"""The tiny model: tokenizer, chat template, deterministic cached build, `scalerl tiny --json`."""

import json
import random
from dataclasses import replace

import pytest
from safetensors.torch import load_file

import scalerl.tiny as T
from scalerl.rollout.types import INTERRUPTION_PHRASE
from scalerl.trainer.sft import SFTConfig

SMALL = T.TinyRecipe(tasks=(("arith", 64), ("synth_code", 16)),
                     sft=SFTConfig(steps=3, batch_size=8), check_limit=8)


@pytest.fixture(scope="module")
def saved_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("tok")
    T.build_tokenizer().save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("text", [
    "23+58=<think>3+8=11 c1 2+5+1=8</think>\\boxed{81}",
    "```python\ndef f(x):\n    return 7*x+1\n```",
    INTERRUPTION_PHRASE, "tabs\tand unicode: é ≤ π",
])
def test_saved_tokenizer_round_trips_one_token_per_ascii_char(saved_tokenizer, text):
    ids = saved_tokenizer.encode(text, add_special_tokens=False)
    assert saved_tokenizer.decode(ids) == text
    plain = text.replace("<think>", "").replace("</think>", "")
    if plain.isascii():
        assert len(ids) == len(plain) + text.count("<think>") + text.count("</think>")


def test_think_tags_are_single_visible_tokens_and_eos_is_special(saved_tokenizer):
    close = saved_tokenizer.encode("</think>", add_special_tokens=False)
    assert len(close) == 1
    assert saved_tokenizer.decode(close, skip_special_tokens=True) == "</think>"
    assert saved_tokenizer.eos_token == T.EOS
    assert saved_tokenizer.decode([saved_tokenizer.eos_token_id], skip_special_tokens=True) == ""


def test_chat_template_is_short_and_drops_system_prompts(saved_tokenizer):
    msgs = [{"role": "system", "content": "a long instruction"},
            {"role": "user", "content": "1+2="}]
    text = saved_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "Q:1+2=\nA:"
    no_think = saved_tokenizer.apply_chat_template(msgs, tokenize=False,
                                                   add_generation_prompt=True,
                                                   enable_thinking=False)
    assert no_think == "Q:1+2=\nA:<think></think>"


def test_recipe_hash_depends_on_recipe_and_data():
    pairs = T.warm_start_texts(SMALL)
    h = T.recipe_hash(SMALL, pairs)
    assert h == T.recipe_hash(SMALL, pairs)
    assert h != T.recipe_hash(replace(SMALL, seed=1), pairs)
    assert h != T.recipe_hash(SMALL, pairs[:-1])


def test_unknown_task_count_is_a_clear_error():
    with pytest.raises(ValueError, match="wants 100000 train samples of 'arith'"):
        T.warm_start_texts(replace(SMALL, tasks=(("arith", 100000),)))


def test_build_is_deterministic_cached_and_loadable(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path / "cache"))
    a = T.ensure_tiny(SMALL, log=lambda m: None)
    assert a.parent == tmp_path / "cache" / "tiny"
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert T.ensure_tiny(SMALL, log=lambda m: None) == a  # cache hit: not rebuilt
    assert (a / "model.safetensors").stat().st_mtime_ns == mtime
    b = T.ensure_tiny(SMALL, out=tmp_path / "again", log=lambda m: None)
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
    info = json.loads((a / "tiny.json").read_text())
    assert 0.0 <= info["heldout_pass1_t1"]["arith"] <= 1.0 and info["params"] > 400_000
    config = json.loads((a / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["head_dim"] == 64
    model = AutoModelForCausalLM.from_pretrained(a)
    assert model.config.eos_token_id == 1


def test_cli_prints_json_path(tmp_path, monkeypatch, capsys):
    from scalerl.cli import main

    monkeypatch.setattr(T, "TinyRecipe", lambda: SMALL)
    assert main(["tiny", "--out", str(tmp_path / "m"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == str(tmp_path / "m") and (tmp_path / "m" / "tokenizer.json").exists()


def test_digit_noise_replaces_only_digits_at_the_given_rate():
    text = "<think>3+8=11 c1 2+5+1=8</think>\\boxed{81}" * 500
    digits = sum(c.isdigit() for c in text)
    assert T.add_digit_noise(text, 0.0, random.Random(0)) == text
    noisy = T.add_digit_noise(text, 0.5, random.Random(0))
    assert len(noisy) == len(text)
    assert all(a == b for a, b in zip(text, noisy, strict=True) if not a.isdigit())
    assert all(b.isdigit() for a, b in zip(text, noisy, strict=True) if a.isdigit())
    # A replaced digit differs with probability 9/10: expected changed share 0.5 * 0.9 = 0.45;
    # over 6,500 digits the binomial standard deviation is 0.006, so +-0.03 is 5 sigma.
    changed = sum(a != b for a, b in zip(text, noisy, strict=True)) / digits
    assert abs(changed - 0.45) < 0.03, changed


def test_warm_start_noise_touches_only_the_noise_tasks():
    clean = T.warm_start_texts(replace(SMALL, digit_noise=0.0))
    noisy = T.warm_start_texts(replace(SMALL, digit_noise=0.5, noise_tasks=("arith",)))
    assert [p for p, _ in clean] == [p for p, _ in noisy]  # prompts never change
    arith = [i for i, (p, s) in enumerate(clean) if "\\boxed" in s]
    code = [i for i in range(len(clean)) if i not in arith]
    assert arith and code
    assert all(clean[i][1] == noisy[i][1] for i in code)
    assert sum(clean[i][1] != noisy[i][1] for i in arith) > 0.9 * len(arith)
