"""The tiny CPU model: a 0.6M-parameter Qwen2 with a character tokenizer, warm-started by SFT.

`ensure_tiny()` returns the path of a Hugging Face model directory (config.json,
model.safetensors, tokenizer.json, chat template, generation_config.json) loadable by transformers
and vLLM, building it on first use and caching it under `$SCALERL_CACHE/tiny/<recipe hash>`
(default `~/.cache/scalerl`). The build is deterministic: same recipe and task data, same hash.
Two models are named (`TINY_MODELS`): `tiny`, the default every test uses, and `tiny-tools`, whose
warm start adds `arith_tool` tool-use traces in the `plain` format and some direct answers
(scalerl/tiny/tools.py), the tool's output masked out of the loss. It does not run RL or vLLM;
the held-out check sampled here uses Hugging Face generation (without tools).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from scalerl.trainer.sft import SFTConfig, SFTExample, sft

RECIPE_VERSION = 1
"""Bump when the build code changes in a way the recipe fields do not capture."""

PAD, EOS, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
ADDED_TOKENS = (THINK_OPEN, THINK_CLOSE)
"""Single tokens that stay visible in decoded text (not special)."""


def byte_alphabet() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each of the 256 bytes, in byte order (byte-level BPE)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
            *range(ord("\xae"), ord("\xff") + 1)]
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


# The vocabulary is one token per byte (a byte-level BPE with no merges), so every text encodes
# without unknowns and one ASCII character is one token. Byte-level rather than a plain
# character model because transformers 5 loads any `qwen2` checkpoint's tokenizer as
# Qwen2Tokenizer, which imposes the byte-level pre-tokenizer: this vocabulary agrees with it.
# Rendered prompt: "Q:<user content>\nA:". System messages are dropped: the tiny model has a short
# context and learns its tasks' formats from the warm start, so instructions would only cost
# tokens. Assistant turns end with EOS. `enable_thinking=False` pre-fills an empty think block.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}Q:{{ m['content'] }}{{ '\\n' }}"
    "{%- elif m['role'] == 'assistant' -%}A:{{ m['content'] }}" + EOS + "{{ '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}A:"
    "{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- endif -%}"
    "{%- endif -%}"
)


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the tiny model's weights (its hash names the cache dir)."""

    tasks: tuple[tuple[str, int | None], ...] = (("arith", None), ("synth_code", 400))
    """(task name, number of train samples used; None = the whole train split)."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=500, batch_size=64, lr=3e-3))
    """With `digit_noise` 0.05, calibrated so held-out arith pass@1 lands near 0.23 sampled at
    T=1 and 0.58 greedy (vLLM, 300 held-out problems): the gap is RL's room."""
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 2
    head_dim: int = 64
    """vLLM's CPU attention kernels reject head_dim 16; 64 works."""
    max_position_embeddings: int = 1024
    seed: int = 0
    """Seeds the weight initialisation (the SFT order uses `sft.seed`)."""
    check_tasks: tuple[str, ...] = ("arith",)
    """Tasks whose held-out pass@1 (sampled at T=1) is measured after the build (tiny.json); one
    turn, no environment, so a tool task is measured without its tool (scalerl/tiny/tools.py
    `tool_pass_rate` measures it with)."""
    check_limit: int = 300
    """Held-out samples per checked task."""
    digit_noise: float = 0.05
    """Probability that each digit of a warm-start solution of a `noise_tasks` task is replaced
    by a uniformly drawn digit (see `add_digit_noise`)."""
    noise_tasks: tuple[str, ...] = ("arith",)
    """Tasks whose warm-start solutions get `digit_noise`."""
    tool_tasks: tuple[tuple[str, int], ...] = ()
    """(task, number of train samples) warm-started as tool-use traces (`plain` format; the task's
    samples need meta `code`, as arith_tool's have), drawn evenly from the train split."""
    direct_frac: float = 0.0
    """Share of the `tool_tasks` samples answered directly instead, without the tool."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.direct_frac <= 1.0:
            raise ValueError(f"TinyRecipe.direct_frac must be in [0, 1], got {self.direct_frac}")


ADDED_FIELDS: dict[str, object] = {"tool_tasks": (), "direct_frac": 0.0}
"""Recipe fields added after the default model was first built, with their off values: hashed
only when set, so the default recipe's hash (its cache directory) is unchanged."""


def build_tokenizer():
    """A byte-per-token `PreTrainedTokenizerFast` plus special and think tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + ADDED_TOKENS + byte_alphabet())}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        model_max_length=1024, padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(recipe: TinyRecipe, vocab_size: int, eos_id: int, pad_id: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size, num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads, num_key_value_heads=recipe.num_heads,
        head_dim=recipe.head_dim, max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=False, eos_token_id=eos_id, bos_token_id=eos_id, pad_token_id=pad_id,
        torch_dtype="float32", use_sliding_window=False,
    )
    torch.manual_seed(recipe.seed)
    return Qwen2ForCausalLM(config)


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False).input_ids


def add_digit_noise(text: str, rate: float, rng: random.Random) -> str:
    """`text` with each ASCII digit replaced, with probability `rate`, by a uniform digit.

    Why the warm start is noisy: trained on clean solutions the tiny model memorises a sharp
    policy (0.07 nats/token) whose sampled errors are mostly systematic, and RL can only nudge
    it. Trained on solutions where digits slip at a known rate, it becomes a calibrated but
    sloppy sampler, as a pretrained model is: its argmax is still the algorithm, its samples
    slip, and a verifier's reward has something to remove. The slips are uniform (a drawn digit
    may equal the original), so the expected per-digit error is `rate * 0.9`.
    """
    if rate <= 0:
        return text
    return "".join(str(rng.randrange(10)) if c.isdigit() and rng.random() < rate else c
                   for c in text)


Solution = str | tuple[tuple[str, bool], ...]
"""A completion: plain text (all trained), or (text, trained) segments (a tool-use trace)."""


def warm_start_texts(recipe: TinyRecipe) -> list[tuple[list[dict[str, str]], Solution]]:
    """(prompt messages, solution) pairs from each task's train split, in a fixed order; the
    solutions of `recipe.noise_tasks` get `recipe.digit_noise` (seeded by `recipe.seed`); then
    the `recipe.tool_tasks` traces (see `tool_pairs`)."""
    from scalerl.envs.catalog import get_task

    rng = random.Random(f"digit-noise:{recipe.seed}")
    pairs = []
    for name, count in recipe.tasks:
        task = get_task(name)
        samples = list(task.samples("train"))[:count]
        if count is not None and len(samples) < count:
            raise ValueError(f"tiny recipe wants {count} train samples of {name!r}; "
                             f"the task has {len(samples)}")
        for s in samples:
            if "solution" not in s.meta:
                raise ValueError(f"task {name!r} sample {s.id} has no meta['solution']")
            solution = str(s.meta["solution"])
            if name in recipe.noise_tasks:
                solution = add_digit_noise(solution, recipe.digit_noise, rng)
            pairs.append((s.messages(task.system_prompt), solution))
    return pairs + tool_pairs(recipe)


def tool_pairs(recipe: TinyRecipe) -> list[tuple[list[dict[str, str]], Solution]]:
    """For each `recipe.tool_tasks` entry, `count` train samples spread evenly over the split
    (every level), each a `plain` tool-use trace or, with probability `direct_frac` (seeded), a
    direct answer."""
    from scalerl.envs.catalog import get_task
    from scalerl.tiny.tools import direct_answer, tool_trace

    tok = build_tokenizer() if recipe.tool_tasks else None
    rng = random.Random(f"direct:{recipe.seed}")
    pairs: list[tuple[list[dict[str, str]], Solution]] = []
    for name, count in recipe.tool_tasks:
        task = get_task(name)
        train = list(task.samples("train"))
        if not 0 < count <= len(train):
            raise ValueError(f"tiny recipe wants {count} tool traces of {name!r}; the task has "
                             f"{len(train)} train samples")
        for k in range(count):
            s = train[k * len(train) // count]
            direct = rng.random() < recipe.direct_frac
            pairs.append((s.messages(task.system_prompt),
                          direct_answer(s) if direct else tool_trace(s, tok)))
    return pairs


def recipe_hash(recipe: TinyRecipe, pairs: Sequence[tuple[list[dict], Solution]]) -> str:
    """Hash of the recipe (`ADDED_FIELDS` only when set), the build code version, the charset
    and the training data."""
    fields = {k: v for k, v in asdict(recipe).items()
              if k not in ADDED_FIELDS or v != ADDED_FIELDS[k]}
    h = hashlib.sha256()
    h.update(json.dumps([RECIPE_VERSION, fields, byte_alphabet(), CHAT_TEMPLATE],
                        sort_keys=True).encode())
    for messages, solution in pairs:
        h.update(json.dumps([messages, solution], sort_keys=True).encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("SCALERL_CACHE") or Path.home() / ".cache" / "scalerl")


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_tiny(
    recipe: TinyRecipe | None = None, *, out: str | Path | None = None, force: bool = False,
    log=print,
) -> Path:
    """Path of the built tiny model, building it (under a file lock) if missing or `force`."""
    recipe = recipe or TinyRecipe()
    pairs = warm_start_texts(recipe)
    digest = recipe_hash(recipe, pairs)
    target = Path(out) if out else cache_root() / "tiny" / digest
    with _lock(target.parent / f".{target.name}.lock"):
        if (target / "tiny.json").exists() and not force:
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            info = _build(recipe, pairs, tmp, log=log)
            info["hash"] = digest
            (tmp / "tiny.json").write_text(json.dumps(info, indent=1))
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return target


def _build(recipe: TinyRecipe, pairs, out: Path, *, log) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: deterministic, and 6x faster than 2 on a busy machine
    try:
        return _train_and_save(recipe, pairs, out, log=log)
    finally:
        torch.set_num_threads(threads)


def _train_and_save(recipe: TinyRecipe, pairs, out: Path, *, log) -> dict:
    start = time.perf_counter()
    tok = build_tokenizer()
    model = build_model(recipe, len(tok), tok.eos_token_id, tok.pad_token_id)
    examples = [sft_example(tok, msgs, sol) for msgs, sol in pairs]

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == recipe.sft.steps - 1:
            log(f"tiny: sft step {step:4d}/{recipe.sft.steps}  loss {loss:.4f}")

    n_params = sum(p.numel() for p in model.parameters())
    log(f"tiny: {n_params / 1e6:.2f}M params, {len(examples)} examples, {recipe.sft.steps} steps")
    result = sft(model, examples, recipe.sft, pad_id=tok.pad_token_id, on_step=on_step)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    heldout = {name: sampled_pass_rate(model, tok, name, limit=recipe.check_limit,
                                       seed=recipe.seed) for name in recipe.check_tasks}
    log(f"tiny: held-out pass@1 at T=1 (HF sampling): {heldout}")
    return {
        "heldout_pass1_t1": heldout,
        "recipe": asdict(recipe), "params": n_params, "examples": len(examples),
        "final_loss": result.losses[-1] if result.losses else None,
        "sft_seconds": round(result.seconds, 2),
        "build_seconds": round(time.perf_counter() - start, 2), "torch": torch.__version__,
    }


def sft_example(tok, messages: list[dict[str, str]], solution: Solution) -> SFTExample:
    """The tokenized pair; a segmented solution keeps its untrained tokens out of the loss."""
    prompt = tuple(prompt_ids(tok, messages))
    if isinstance(solution, str):
        return SFTExample(prompt, tuple(tok(solution, add_special_tokens=False).input_ids
                                        + [tok.eos_token_id]))
    from scalerl.tiny.tools import segment_ids

    ids, mask = segment_ids(tok, solution, tok.eos_token_id)
    return SFTExample(prompt, ids, completion_mask=mask)


@torch.no_grad()
def sampled_pass_rate(model, tokenizer, task_name: str, *, limit: int = 300, seed: int = 0,
                      temperature: float = 1.0, max_new_tokens: int = 96) -> float:
    """Held-out (`test`) pass@1 with one sample per prompt, by Hugging Face generation."""
    from scalerl.envs.catalog import get_task

    task = get_task(task_name)
    samples = list(task.samples("test"))[:limit]
    prompts = [tokenizer.apply_chat_template(s.messages(task.system_prompt), tokenize=False,
                                             add_generation_prompt=True) for s in samples]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                      add_special_tokens=False)
    torch.manual_seed(seed)
    out = model.generate(**batch, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(out[:, batch.input_ids.shape[1]:], skip_special_tokens=True)
    correct = sum(task.score(s, t).correct for s, t in zip(samples, texts, strict=True))
    return correct / max(1, len(samples))


def tools_recipe() -> TinyRecipe:
    """`tiny-tools`: the default's warm start plus 2,000 arith_tool problems (400 per level),
    a fifth of them answered directly without the tool, so that the same model without tools is
    a real baseline (it must then compute a 7-12 digit result itself)."""
    return TinyRecipe(tool_tasks=(("arith_tool", 2000),), direct_frac=0.2,
                      check_tasks=("arith", "arith_tool"))


TINY_MODELS: dict[str, Callable[[], TinyRecipe]] = {
    "tiny": lambda: TinyRecipe(),
    "tiny-tools": tools_recipe,
}
"""The tiny models by name (`scalerl.models.resolve_model` resolves these names)."""


def tiny_recipe(name: str) -> TinyRecipe:
    """The recipe of tiny model `name`; ValueError naming the known ones."""
    if name not in TINY_MODELS:
        raise ValueError(f"unknown tiny model {name!r}; known: {', '.join(TINY_MODELS)}")
    return TINY_MODELS[name]()
