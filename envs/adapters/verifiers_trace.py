"""A verifiers episode's trace, as the runner reports it, turned into scalerl's token sequence.

The runner (envs/adapters/verifiers_runner.py) sends, per episode, the trainable branch of its
trace (each message node's token ids and sampled mask: verifiers' `Trace.branches`), the
taskset's rewards and errors, and what the vLLM server returned for every model call (token ids,
logprobs, weight-version spans, the prompt's length and digest). `played_from_record` checks that
they agree, token for token, and gives a `Played`: the prompt (the tokens before the first
sampled one), the completion (every later token: sampled ones with the server's logprob and
weight version, the environment's with no logprob and the version of the token before them), its
segments (one per run of sampled or environment tokens) and the verdict. Anything that does not
hold (no trace, several branches, an error, a token or prompt the server did not see, a version
label scalerl did not set) raises `TraceError`, which makes the rollout's verdict `error`. No
tokenizer, no generator, no I/O: rollout/external.py makes the Rollout.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalerl.envs.base import Score, truncate
from scalerl.envs.tool_env import credit_score

TRUNCATING_STOPS = frozenset({"max_turns", "max_input_tokens", "max_output_tokens",
                              "max_total_tokens"})
"""verifiers' stop conditions that are a limit running out (the rollout is `truncated`)."""


class TraceError(ValueError):
    """The episode failed or its trace cannot be one token-exact rollout (the detail says why)."""


@dataclass(frozen=True)
class Segment:
    """A run of the completion: sampled by the policy (`assistant`) or written by the
    environment (its message's role), `tokens[start:end]`."""

    role: str
    start: int
    end: int
    trained: bool


@dataclass(frozen=True)
class Played:
    """One verifiers episode as one scalerl rollout's tokens and verdict."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    versions: tuple[int, ...]
    segments: tuple[Segment, ...]
    finish: str
    """`stop`, or `truncated` when a call hit its token limit or a verifiers limit stopped it."""
    ended: str
    """verifiers' stop condition (`agent_completed`, `max_turns`, ...)."""
    score: Score | None
    """The taskset's verdict (its rewards' sum, mapped through `reward_range`); None when it
    has no reward (the task's judge decides)."""
    meta: dict[str, Any] = field(default_factory=dict)


def prompt_digest(ids: Sequence[int]) -> str:
    """sha256 of token ids as int32s: the runner's `prompt_digest`, on this side."""
    return hashlib.sha256(array("i", ids).tobytes()).hexdigest()[:32]


def verdict_of(record: Mapping[str, Any], reward_range: tuple[float, float]) -> Score | None:
    """The taskset's verdict on a successful episode: its weighted rewards' sum through
    `reward_range`; None without rewards; TraceError when scoring did not run."""
    rewards = record.get("rewards") or {}
    missing = sorted(k for k, v in rewards.items() if v is None)
    if missing:
        raise TraceError(f"verifiers did not score the episode (rewards {', '.join(missing)} "
                         "are unset)")
    if not rewards:
        return None
    score = credit_score(sum(float(v) for v in rewards.values()), reward_range)
    parts = ", ".join(f"{k}={float(v):g}" for k, v in rewards.items())
    return Score(score.status, truncate(f"{score.detail} ({parts})"), reward=score.reward)


def check_episode(record: Mapping[str, Any]) -> None:
    """TraceError unless the episode succeeded with one trace of one trainable branch."""
    errors = list(record.get("errors") or [])
    if errors:
        raise TraceError(truncate(f"verifiers episode failed: {errors[-1]}"
                                  + (f" (+{len(errors) - 1} earlier)" if len(errors) > 1 else "")))
    if record.get("traces") != 1:
        raise TraceError(f"the episode has {record.get('traces')} trainable traces; a rollout is "
                         "one trained agent's")
    if record.get("timeout"):
        raise TraceError(f"verifiers stage deadline expired ({record.get('stop')})")
    if not record.get("ok"):
        raise TraceError(f"verifiers episode not ok (stopped {record.get('stop')!r})")
    if record.get("branches") != 1:
        raise TraceError(f"the trace has {record.get('branches')} trainable branches: its history "
                         "was re-rendered, not extended token by token (a renderer that cannot "
                         "bridge turns, or a compaction); a rollout is one token sequence")


def sequence_of(nodes: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[bool], list[str]]:
    """The branch's tokens, sampled mask and each token's message role."""
    tokens: list[int] = []
    mask: list[bool] = []
    roles: list[str] = []
    for i, node in enumerate(nodes):
        ids, bits = list(node.get("token_ids") or []), list(node.get("mask") or [])
        if len(ids) != len(bits):
            raise TraceError(f"trace node {i}: {len(ids)} token ids but a mask of {len(bits)}")
        tokens += [int(t) for t in ids]
        mask += [bool(b) for b in bits]
        roles += [str(node.get("role") or "user")] * len(ids)
    return tokens, mask, roles


def call_versions(call: Mapping[str, Any], k: int) -> list[int]:
    """Per-token policy versions of call k from its weight-version spans."""
    n = len(call.get("token_ids") or [])
    versions: list[int] = []
    for span in call.get("versions") or []:
        try:
            version = int(span["version"])
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"model call {k}: tokens labelled with weights {span!r:.60}, not a "
                             "policy version scalerl set (are these scalerl's servers?)") from None
        versions += [version] * (int(span["end"]) - int(span["start"]))
    if len(versions) != n:
        raise TraceError(f"model call {k}: weight-version spans cover {len(versions)} of its {n} "
                         "tokens")
    return versions


def check_calls(tokens: list[int], mask: list[bool],
                calls: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[int]]:
    """(logprobs, versions) of the sampled tokens, in order, from the server's replies; TraceError
    unless each call's tokens are the branch's next sampled ones and its prompt is exactly the
    branch's tokens before them."""
    positions = [i for i, m in enumerate(mask) if m]
    logprobs: list[float] = []
    versions: list[int] = []
    for k, call in enumerate(calls):
        ids = [int(t) for t in call.get("token_ids") or []]
        lps = list(call.get("logprobs") or [])
        if len(lps) != len(ids) or any(not isinstance(x, (int, float)) for x in lps):
            raise TraceError(f"model call {k}: {len(lps)} logprobs for {len(ids)} tokens")
        at = positions[len(logprobs): len(logprobs) + len(ids)]
        if [tokens[i] for i in at] != ids:
            raise TraceError(f"model call {k}: the trace's sampled tokens differ from the "
                             "tokens the server returned")
        start = at[0] if at else None
        if start is not None and (call.get("prompt_len") != start or call.get(
                "prompt_digest") != prompt_digest(tokens[:start])):
            raise TraceError(f"model call {k}: its prompt is not the trace's tokens before its "
                             "completion (the conversation was re-rendered)")
        logprobs += [float(x) for x in lps]
        versions += call_versions(call, k)
    if len(logprobs) != len(positions):
        raise TraceError(f"the trace has {len(positions)} sampled tokens but the server returned "
                         f"{len(logprobs)}")
    return logprobs, versions


def segments_of(mask: Sequence[bool], roles: Sequence[str]) -> tuple[Segment, ...]:
    """Maximal runs of sampled / environment tokens of the completion."""
    out: list[Segment] = []
    start = 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            role = "assistant" if mask[start] else roles[start]
            out.append(Segment(role, start, i, bool(mask[start])))
            start = i
    return tuple(out)


def played_from_record(record: Mapping[str, Any],
                       reward_range: tuple[float, float] = (0.0, 1.0)) -> Played:
    """The rollout's tokens and verdict from the runner's episode record (module docstring)."""
    check_episode(record)
    tokens, mask, roles = sequence_of(record.get("nodes") or [])
    calls = list(record.get("calls") or [])
    logprobs, versions = check_calls(tokens, mask, calls)
    if not logprobs:
        raise TraceError("the episode sampled no tokens")
    first = mask.index(True)
    lp_iter, v_iter = iter(logprobs), iter(versions)
    out_lp: list[float | None] = []
    out_v: list[int] = []
    for sampled in mask[first:]:
        out_lp.append(next(lp_iter) if sampled else None)
        out_v.append(next(v_iter) if sampled else out_v[-1])
    stop = str(record.get("stop") or "")
    length = calls and calls[-1].get("finish_reason") == "length"
    meta = {"verifiers_stop": stop, "verifiers_calls": len(calls),
            "verifiers_rewards": dict(record.get("rewards") or {}),
            "verifiers_metrics": dict(record.get("metrics") or {})}
    return Played(
        prompt=tuple(tokens[:first]), tokens=tuple(tokens[first:]), logprobs=tuple(out_lp),
        versions=tuple(out_v), segments=segments_of(mask[first:], roles[first:]),
        finish="truncated" if length or stop in TRUNCATING_STOPS else "stop", ended=stop,
        score=verdict_of(record, reward_range), meta=meta)
