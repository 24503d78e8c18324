"""Tool use for the tiny model: `arith_tool` warm-start traces, the held-out check with the tool.

A trace is what the generator produces at rollout time in the `plain` tool format, cut into
segments (text, trained): assistant turn 1 (a ```python block computing the answer, closed, then
the stop string ```output), the observation exactly as `PlainFormat.delta_text` renders the
program's real output (untrained: the model reads it, never writes it, as in RL), and assistant
turn 2 (the answer in \\boxed{}); the caller appends EOS. The output is computed here in Python
from the task's own program (`print(A * B)` or `print(A // B)`, checked against that shape), not
in the sandbox, so thousands of traces cost nothing; a test checks it against a real session.
A direct answer (no tool) is one trained segment. `tool_pass_rate` samples held-out problems by
Hugging Face generation and plays each episode with the task's environment and a real sandbox
session pool; `scalerl tiny --model MODEL --check-tools` prints it beside the pass@1 of the same
model without tools (no environment: one turn, the model must write the result itself) as JSON
(scalerl/commands/tiny.py). This module builds no model and trains nothing (scalerl/tiny/
__init__.py does).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from scalerl.envs.base import Sample
from scalerl.envs.context import run_context
from scalerl.envs.environment import ToolOutcome
from scalerl.envs.tool_format import python_call, tool_format
from scalerl.envs.turns import EnvFailed, Play, prompt_with_opening

Segment = tuple[str, bool]
"""(text, trained): trained text is the model's own; untrained text is the environment's."""
TRACE_FORMAT = "plain"
_PROGRAM = re.compile(r"print\((\d+) (\*|//) (\d+)\)")
_OPS = {"*": lambda a, b: a * b, "//": lambda a, b: a // b}


def program_output(code: str) -> str:
    """What the task's own program prints (stdout, with print's newline); ValueError for any
    program that is not `print(A * B)` / `print(A // B)` on integers (nothing else is run)."""
    m = _PROGRAM.fullmatch(code)
    if m is None:
        raise ValueError(f"tool trace: program {code[:60]!r} is not print(A * B) or "
                         "print(A // B); only the arith_tool task's own programs are traced")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return f"{_OPS[op](a, b)}\n"


def tool_trace(sample: Sample, tokenizer: Any) -> tuple[Segment, ...]:
    """The `plain`-format trace of a sample whose meta has `code` (arith_tool's): turn 1,
    the observation (untrained), turn 2. ValueError when the program's output is not the gold
    answer."""
    fmt = tool_format(TRACE_FORMAT)
    code = str(sample.meta.get("code") or "")
    turn1 = f"```python\n{code}\n```\n{fmt.stop[0]}"
    output = program_output(code)
    if output.strip() != str(sample.answer):
        raise ValueError(f"tool trace: sample {sample.id} program prints {output.strip()!r}, "
                         f"the gold answer is {sample.answer!r}")
    messages = fmt.observation([python_call(code)], [ToolOutcome("ok", output, 0.0)])
    observation = fmt.delta_text(tokenizer, messages, turn1)
    return (turn1, True), (observation, False), (f"\\boxed{{{sample.answer}}}", True)


def direct_answer(sample: Sample) -> tuple[Segment, ...]:
    """The answer written at once, without the tool (the model must compute it itself)."""
    return ((f"\\boxed{{{sample.answer}}}", True),)


def segment_ids(tokenizer: Any, segments: Sequence[Segment],
                eos_id: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """(token ids, trained mask) of the segments plus a trained EOS: each segment tokenized on
    its own, as the generator appends an observation's `encode(delta_text)` to sampled tokens."""
    ids: list[int] = []
    mask: list[bool] = []
    for text, trained in segments:
        part = tokenizer(text, add_special_tokens=False).input_ids
        ids += part
        mask += [trained] * len(part)
    return tuple(ids + [eos_id]), tuple(mask + [True])


# --- the held-out check with the tool: HF generation, the task's environment, a real sandbox ----

@torch.no_grad()
def _sample_turn(model, tokenizer, contexts: list[list[int]], *, stop: Sequence[str],
                 temperature: float, max_new_tokens: int) -> list[list[int]]:
    """One assistant turn for each context: its sampled ids, cut at EOS (kept) or after the
    first stop string (kept), as the engine returns them."""
    width = max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts])
    attn = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    out = model.generate(input_ids=ids, attention_mask=attn, do_sample=True,
                         temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, pad_token_id=pad,
                         eos_token_id=tokenizer.eos_token_id, stop_strings=list(stop),
                         tokenizer=tokenizer)
    turns = []
    for row in out[:, width:].tolist():
        kept: list[int] = []
        for tok in row:
            if tok == pad:
                break
            kept.append(tok)
            if tok == tokenizer.eos_token_id or tokenizer.decode(kept).endswith(tuple(stop)):
                break
        turns.append(kept)
    return turns


def tool_pass_rate(model, tokenizer, task_name: str, sessions: Any, *, limit: int = 250,
                   seed: int = 0, temperature: float = 1.0,
                   max_new_tokens: int = 64, workers: int = 4) -> dict[str, float]:
    """Held-out pass@1 with the tool (one sample per prompt): each turn sampled by HF generation
    up to the format's stop string, each answered by the task's environment under the turn rule
    every loop shares (envs/turns.py `Play`; calls run in sessions from `sessions`, a
    sandbox/session.py SessionPool), its observation appended as `encode(delta_text)`, until the
    episode ends. An environment that fails counts as not passed. Returns pass@1 and the mean
    tool calls per episode."""
    from scalerl.envs.catalog import get_task

    task, fmt = get_task(task_name), tool_format(TRACE_FORMAT)
    if task.environment is None:
        raise ValueError(f"task {task_name!r} has no environment: tool_pass_rate needs one")
    samples = list(task.samples("test"))[:limit]
    plays = [Play(task.environment, s, run_context(TRACE_FORMAT, None, sessions=sessions))
             for s in samples]
    try:
        msgs = [prompt_with_opening(s.messages(task.system_prompt), p.start())
                for s, p in zip(samples, plays, strict=True)]
        contexts = [tokenizer(tokenizer.apply_chat_template(m, tokenize=False,
                                                            add_generation_prompt=True),
                              add_special_tokens=False).input_ids for m in msgs]
        texts, calls = _play_turns(model, tokenizer, plays, msgs, contexts, fmt, seed,
                                   temperature, max_new_tokens, workers)
        final = [tokenizer.decode(tokenizer(t, add_special_tokens=False).input_ids,
                                  skip_special_tokens=True) for t in texts]
        verdicts = [None if t is None else (p.verdict(t) or task.score(s, t))
                    for s, p, t in zip(samples, plays, final, strict=True)]
    finally:
        for p in plays:
            p.close()
    n = max(1, len(samples))
    return {"pass1": sum(v is not None and v.correct for v in verdicts) / n,
            "tool_calls_mean": sum(calls) / n}


def _play_turns(model, tokenizer, plays: list[Play], msgs, contexts, fmt, seed: int,
                temperature: float, max_new_tokens: int, workers: int):
    """Each episode's text (None for one whose environment failed) and its tool calls."""
    texts: list[str | None] = [""] * len(plays)
    calls = [0] * len(plays)
    torch.manual_seed(seed)
    active = list(range(len(plays)))
    for k in range(max((p.env.max_turns for p in plays), default=0)):
        if not active:
            break
        turns = _sample_turn(model, tokenizer, [contexts[i] for i in active], stop=fmt.stop,
                             temperature=temperature, max_new_tokens=max_new_tokens)
        turn_texts = [tokenizer.decode(turn) for turn in turns]
        for i, turn, turn_text in zip(active, turns, turn_texts, strict=True):
            contexts[i] = contexts[i] + turn
            texts[i] += turn_text

        def answer(i: int, k: int = k):
            transcript = [*msgs[i], {"role": "assistant", "content": texts[i]}]
            try:
                return plays[i].answer(transcript, k)
            except EnvFailed:
                return None

        with ThreadPoolExecutor(workers) as pool:  # calls run concurrently, as in rollouts
            answers = list(pool.map(answer, active))
        still = []
        for i, turn_text, ans in zip(active, turn_texts, answers, strict=True):
            if ans is None:
                texts[i] = None
                continue
            calls[i] += len(ans.reply.calls)
            if ans.ended is not None:
                continue
            delta = fmt.delta_text(tokenizer, ans.reply.messages, turn_text)
            contexts[i] = contexts[i] + tokenizer(delta, add_special_tokens=False).input_ids
            texts[i] += delta
            still.append(i)
        active = still
    return texts, calls
