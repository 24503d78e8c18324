"""`scalerl export RUN_DIR_OR_CHECKPOINT --out DIR [--base MODEL]`.

Merges a LoRA run's adapter (its latest checkpoint's, or the checkpoint named) into the base
model (PEFT `merge_and_unload`, in fp32, saved in the base's dtype) and writes a Hugging Face
model and tokenizer under `--out`, which transformers and vLLM load like any model. The base is
the one the adapter's adapter_config.json names, unless `--base` names another copy of it. A
full fine-tuning checkpoint is already such a model: it is refused, pointing at it. The merge
lives in trainer/lora.py; this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerl.commands import CommandError

HELP = ("merge a LoRA run's adapter into its base model: a Hugging Face model + tokenizer "
        "(RUN_DIR: its latest checkpoint)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="RUN_DIR_OR_CHECKPOINT",
                        help="a LoRA run directory (its latest checkpoint) or one checkpoint")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="where the merged model and its tokenizer are written")
    parser.add_argument("--base", default=None, metavar="MODEL",
                        help="the base model (default: the one the adapter's "
                        "adapter_config.json names)")


def checkpoint_of(source: Path) -> Path:
    """The checkpoint `source` names: itself, or a run directory's latest; CommandError (one
    line) when there is none or it holds no adapter."""
    from scalerl.trainer.checkpoint import is_lora_checkpoint, latest_checkpoint
    from scalerl.trainer.lora import ADAPTER_DIR

    ckpt = latest_checkpoint(source) if (source / "checkpoints").is_dir() else source
    if ckpt is None or not ckpt.is_dir():
        raise CommandError(f"scalerl export: {source}: no checkpoint there (a run directory "
                           "or one of its checkpoints/step-NNNNNN)")
    if not is_lora_checkpoint(ckpt):
        raise CommandError(f"scalerl export: {ckpt} holds no {ADAPTER_DIR}/: a full "
                           "fine-tuning checkpoint is a Hugging Face model already (load it "
                           "as it is)")
    return ckpt


def export(source: Path, out: Path, base: str | None = None) -> Path:
    """Merge the adapter of `source`'s checkpoint into its base; write model + tokenizer."""
    from transformers import AutoTokenizer

    from scalerl.trainer.lora import ADAPTER_DIR, adapter_base, merged_model

    ckpt = checkpoint_of(source)
    adapter = ckpt / ADAPTER_DIR
    base = base or adapter_base(adapter)
    if not Path(base).exists() and base.startswith("/"):
        raise CommandError(f"scalerl export: the base model {base} (named by "
                           f"{adapter}/adapter_config.json) is not there: pass --base")
    model = merged_model(adapter, base)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer_from = ckpt if (ckpt / "tokenizer_config.json").is_file() else base
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return ckpt


def run(args: argparse.Namespace) -> int:
    try:
        ckpt = export(Path(args.source), Path(args.out), args.base)
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    print(f"{args.out}: {ckpt}'s adapter merged into its base (a Hugging Face model)")
    return 0
