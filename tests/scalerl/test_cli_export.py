"""`scalerl export`: a LoRA checkpoint's adapter merged into its base gives the logits of base +
adapter as PEFT computes them unmerged (independently of the merge); a run directory means its
latest checkpoint; a full fine-tuning checkpoint and a missing one are refused in one line."""

from pathlib import Path

import pytest
import torch

from scalerl import cli

VOCAB = 40


def tiny_base(path: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(path)
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    PreTrainedTokenizerFast(tokenizer_object=words).save_pretrained(path)
    return path


def lora_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory with two LoRA checkpoints (the later one's adapter random, as trained)."""
    from transformers import AutoModelForCausalLM

    from scalerl.trainer.checkpoint import save_checkpoint
    from scalerl.trainer.lora import wrap_lora
    from scalerl.trainer.lora_config import LoraConfig

    base = tiny_base(tmp_path / "base")
    lora = LoraConfig(rank=4, alpha=16.0, targets=("q_proj", "v_proj", "up_proj"))
    model = wrap_lora(AutoModelForCausalLM.from_pretrained(base), lora)
    run = tmp_path / "run"
    save_checkpoint(run, 1, model, None, {}, lora=lora.serving(2))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(torch.randn_like(p) * 0.3)
    save_checkpoint(run, 2, model, None, {}, lora=lora.serving(2))
    return base, run


def test_merged_model_has_the_logits_of_base_plus_adapter(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, run = lora_run(tmp_path)
    assert cli.main(["export", str(run), "--out", str(tmp_path / "merged")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert AutoTokenizer.from_pretrained(tmp_path / "merged")("a").input_ids == [1]
    ids = torch.tensor([[1, 7, 3, 9, 22, 5]])
    plain = AutoModelForCausalLM.from_pretrained(base)
    adapter = run / "checkpoints" / "step-000002" / "adapter"
    unmerged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
    with torch.no_grad():
        want, got, before = unmerged(ids).logits, merged(ids).logits, plain(ids).logits
    assert (want - before).abs().max() > 1e-2  # the adapter moves the logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_full_checkpoints_and_missing_ones_are_refused(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from scalerl.trainer.checkpoint import save_checkpoint

    model = AutoModelForCausalLM.from_pretrained(tiny_base(tmp_path / "base"))
    full = save_checkpoint(tmp_path / "full", 1, model, None, {})
    assert cli.main(["export", str(full), "--out", str(tmp_path / "o")]) == 2
    assert "holds no adapter/: a full fine-tuning checkpoint" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint there" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["/nowhere/base"])
def test_a_base_model_that_moved_needs_base(tmp_path, capsys, missing):
    _, run = lora_run(tmp_path)
    config = run / "checkpoints" / "step-000002" / "adapter" / "adapter_config.json"
    config.write_text(config.read_text().replace(str(tmp_path / "base"), missing))
    assert cli.main(["export", str(run), "--out", str(tmp_path / "o")]) == 2
    assert f"the base model {missing}" in capsys.readouterr().err
