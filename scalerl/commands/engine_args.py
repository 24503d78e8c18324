"""The engine, budget and sampling flags shared by every command that starts a vLLM engine.

`add_engine_args` / `add_budget_args` declare the flags once (`generate`, `eval`, ...), and
`engine_config` / `override_budget` turn them into an `EngineConfig` and a `Budget` on top of a
base (a run's config.yaml, or the defaults), so a flag means the same thing in every command.
`add_grading_args` / `grading` do the same for how completions are graded (the sandbox backend,
the math pool's size). `start_generator` starts the engine (or connects to `--server` URLs) and
turns a failure into one line (`EngineStartError`).
A flag left out keeps the base's value; nothing here parses task or model names.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from scalerl.envs.grading import Grading
from scalerl.rollout.budget import parse_thinking
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.types import Budget

DEFAULT_BUDGET = Budget(thinking=None, answer=512)
"""The budget of a command given no run config and no budget flags."""
MAX_DEFAULT_LEN = 32768
"""Longest default context: the model's own context length, at most this."""


class EngineStartError(RuntimeError):
    """The vLLM engine could not start; the message is one line naming the model and why."""


def add_engine_args(parser: argparse.ArgumentParser, *, servers: bool = True) -> None:
    """The engine flags; `servers`: also `--server URL` (generate on vLLM servers)."""
    g = parser.add_argument_group("engine (unset flags: the run's config.yaml, else defaults)")
    if servers:
        g.add_argument("--server", action="append", metavar="URL",
                       help="generate on this vLLM server (`scalerl serve`) instead of an engine "
                       "in this process; repeat for several")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="engine weights dtype (default float32)")
    g.add_argument("--fp32-head", action=argparse.BooleanOptionalAction, default=None,
                   help="LM head in FP32 (default on, as the trainer's policy.fp32_head)")
    g.add_argument("--kv-cache-gib", type=float, help="KV-cache GiB (default 1)")
    g.add_argument("--memory-fraction", type=float,
                   help="vLLM gpu_memory_utilization (host memory on CPU); default 0.1")
    g.add_argument("--max-model-len", type=int,
                   help="longest prompt + completion in tokens; default the model's context "
                   f"length (at most {MAX_DEFAULT_LEN})")
    g.add_argument("--max-num-seqs", type=int, help="most sequences scheduled at once (256)")
    if servers:
        g.add_argument("--verbose", action="store_true",
                       help="show the vLLM engine's own output here (default: in a log file, "
                       "named at the end)")
    g.add_argument("--log-stats", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM's own statistics: throughput log lines and, on a server, the "
                   "Prometheus gauges at /metrics (default off)")


def add_tool_args(parser: argparse.ArgumentParser) -> None:
    """`--tools`, `--max-turns`, `--tool-format`: tool-integrated evaluation and generation."""
    from scalerl.envs.played import TOOLS

    g = parser.add_argument_group("tools (multi-turn; unset: every task as it is registered)")
    g.add_argument("--tools", choices=TOOLS,
                   help="run each task with this sandboxed tool between its turns (tool-"
                   "integrated reasoning); a task with an environment of its own is refused")
    g.add_argument("--max-turns", type=int, default=4,
                   help="assistant turns at most with --tools (default 4)")
    g.add_argument("--tool-format", choices=("auto", "chat", "plain"),
                   help="how tool calls are written: chat (the chat template's tools, e.g. "
                   "Qwen3's <tool_call>), plain (a ```python block answered by ```output), auto "
                   "(chat when the template renders tools); default: a run dir's "
                   "engine.tool_format, else auto")


def with_tool_args(args: argparse.Namespace, tasks: dict) -> dict:
    """`tasks` (name -> Task) with `--tools` applied; ValueError (one line) on a bad value."""
    from scalerl.envs.played import with_tools

    if getattr(args, "tools", None) is None:
        return dict(tasks)
    if args.max_turns < 1:
        raise ValueError(f"--max-turns must be >= 1, got {args.max_turns}")
    return {name: with_tools(task, args.tools, args.max_turns) for name, task in tasks.items()}


def add_grading_args(parser: argparse.ArgumentParser) -> None:
    from scalerl.sandbox.config import KNOWN_BACKENDS

    g = parser.add_argument_group("grading (unset flags: the run's config.yaml, else this "
                                  "machine's defaults)")
    g.add_argument("--sandbox", choices=KNOWN_BACKENDS, metavar="BACKEND",
                   help=f"sandbox backend for code tasks ({', '.join(KNOWN_BACKENDS)}; default "
                   "bwrap, else docker)")
    g.add_argument("--math-workers", type=int, help="math-verify processes (default min(4, "
                   "cores))")
    add_cluster_args(g)


def add_cluster_args(group: Any) -> None:
    """`--cluster local|ray` and `--ray-address`: where grading runs (verifiers.cluster)."""
    group.add_argument("--cluster", choices=("local", "ray"),
                       help="grade here (local) or on a Ray cluster's grading actors (ray; "
                       "pip install 'scalerl[ray]'); default: the run's verifiers.cluster, "
                       "else local")
    group.add_argument("--ray-address", metavar="ADDR",
                       help="with --cluster ray: the cluster (auto, HOST:PORT, "
                       "ray://HOST:10001); default: start a Ray on this machine")


def grading(args: argparse.Namespace, base: Grading | None = None) -> Grading:
    """The grading settings: `base` (a run's, else the defaults) with the flags given;
    ValueError (one line) on a bad value."""
    base = base or Grading()
    sandbox, verifiers = base.sandbox, base.verifiers
    if getattr(args, "sandbox", None) is not None:
        sandbox = dataclasses.replace(sandbox, backend=args.sandbox)
    changes = {key: getattr(args, key, None) for key in ("math_workers", "cluster")}
    if getattr(args, "ray_address", None) is not None:
        changes["ray_address"] = args.ray_address
        changes["cluster"] = changes["cluster"] or "ray"
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes:
        verifiers = dataclasses.replace(verifiers, **changes)
    return Grading(sandbox=sandbox, verifiers=verifiers)


def add_budget_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("length budget (unset flags: the run's per-task budgets, "
                                  f"else no thinking budget and {DEFAULT_BUDGET.answer} answer "
                                  "tokens)")
    g.add_argument("--thinking-budget", metavar="A[:B]",
                   help="thinking tokens before forced interruption; A:B samples per rollout; "
                   "'none' for models with no thinking format")
    g.add_argument("--answer-budget", type=int, help="tokens after </think> (natural or forced)")
    g.add_argument("--max-tokens", type=int,
                   help="hard cap on completion tokens, forced ones included")


def override_budget(args: argparse.Namespace, base: Budget) -> Budget:
    """`base` with the budget flags that were given; ValueError (one line) on a bad value."""
    changes: dict = {}
    if args.thinking_budget is not None:
        changes["thinking"] = parse_thinking(args.thinking_budget)
    if args.answer_budget is not None:
        changes["answer"] = args.answer_budget
    if args.max_tokens is not None:
        changes["total"] = args.max_tokens
    return dataclasses.replace(base, **changes) if changes else base


def model_max_len(model: str) -> int | None:
    """The model's context length (config.json `max_position_embeddings`) at most
    MAX_DEFAULT_LEN; None when the model has no local config.json."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings") or MAX_DEFAULT_LEN
    return min(int(value), MAX_DEFAULT_LEN)


def engine_config(args: argparse.Namespace, model: str,
                  base: EngineConfig | None = None) -> EngineConfig:
    """`base` (default `EngineConfig()` with the model's context length) with the engine flags
    given. A `--max-model-len` beyond the model's own context length is a one-line ValueError."""
    own = model_max_len(model)
    if base is None:
        base = EngineConfig(max_model_len=own or EngineConfig().max_model_len)
    flags = {"dtype": args.dtype, "kv_cache_gib": args.kv_cache_gib,
             "memory_fraction": args.memory_fraction, "max_model_len": args.max_model_len,
             "max_num_seqs": args.max_num_seqs, "log_stats": getattr(args, "log_stats", None),
             "tool_format": getattr(args, "tool_format", None)}
    if getattr(args, "server", None):  # commands without --server leave the base's servers
        flags["servers"] = tuple(args.server)
    changes = {k: v for k, v in flags.items() if v is not None}
    config = dataclasses.replace(base, **changes)
    if own is not None and config.max_model_len > own:
        raise ValueError(f"--max-model-len {config.max_model_len} exceeds the context length of "
                         f"{model} ({own} tokens)")
    return config


def served_model(urls: list[str], timeout_s: float = 30.0) -> str:
    """The model the first of `urls` (vLLM servers) serves, as a name this machine can load the
    tokenizer of: its path when that directory is here, else its id (a hub id, or `tiny`).
    ValueError (one line) when the server does not answer or serves nothing loadable here."""
    import urllib.request

    from scalerl.models import resolve_model

    url = urls[0].rstrip("/")
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout_s) as reply:
            served = json.loads(reply.read())["data"][0]
    except Exception as exc:  # unreachable, not vLLM, empty: the user needs the URL and why
        raise ValueError(f"--server {url}: GET /v1/models failed ({type(exc).__name__}: {exc});"
                         " give --model") from None
    names = [n for n in (served.get("root"), served.get("id")) if n]
    for name in names:
        try:
            return resolve_model(name)
        except ValueError:
            continue
    raise ValueError(f"--server {url} serves {' / '.join(map(repr, names))}, which is not a "
                     "model directory or cached hub model here; give --model (its tokenizer "
                     "must be readable here)")


def model_of(args: argparse.Namespace) -> str:
    """`--model` resolved, or, with `--server` and no `--model`, what the server serves."""
    from scalerl.models import resolve_model

    if args.model:
        return resolve_model(args.model)
    if getattr(args, "server", None):
        return served_model(args.server)
    raise ValueError("--model is required (or --server URL: the server says what it serves)")


def lora_base(adapter: tuple, config: EngineConfig) -> tuple[str, EngineConfig]:
    """The base model of a LoRA checkpoint's adapter (`checkpoint_adapter`), resolved here, and
    `config` serving that adapter."""
    import dataclasses

    from scalerl.models import resolve_model

    base, serving, _ = adapter
    return resolve_model(base), dataclasses.replace(config, lora=serving)


def with_adapter(generator, folder: Path) -> None:
    """Load a LoRA checkpoint's adapter (its folder) on `generator` as version 1; the
    generator is closed if that fails."""
    from safetensors.torch import load_file

    try:
        generator.update_adapter(load_file(str(folder / "adapter_model.safetensors")).items(), 1,
                                 timeout_s=generator.config.weight_timeout_s)
    except BaseException:
        generator.close()
        raise


def start_generator(model: str, config: EngineConfig, *, fp32_head: bool,
                    log: Path | None = None, **kwargs):
    """A started generator (on `config.servers` when set, else in this process); EngineStartError
    (one line) when vLLM refuses or fails to start, or no server answers. With `log`, what an
    engine in this process says (its loggers, its processes' output) goes there. A LoRA run's
    checkpoint (`<checkpoint>/adapter/`) is served as its base model with the adapter loaded
    (no merge)."""
    from scalerl.rollout.factory import make_generator
    from scalerl.rollout.lora_adapters import checkpoint_adapter

    try:
        adapter = checkpoint_adapter(model)  # a LoRA run's checkpoint: base model + adapter
        if adapter is not None:
            model, config = lora_base(adapter, config)
        if log is None or config.servers:
            generator = make_generator(model, config, fp32_head=fp32_head, **kwargs)
        else:
            from scalerl.engine_log import output_to, route_vllm_logging

            route_vllm_logging(log)
            with output_to(log):
                generator = make_generator(model, config, fp32_head=fp32_head, **kwargs)
        if adapter is not None:
            with_adapter(generator, adapter[2])
        return generator
    except Exception as exc:  # vLLM raises many types; the user needs the model and the reason
        reason = " ".join(str(exc).split())[:600] or type(exc).__name__
        where = f"the vLLM servers {', '.join(config.servers)}" if config.servers else (
            "the vLLM engine")
        raise EngineStartError(f"{where} did not start for {model}: "
                               f"{type(exc).__name__}: {reason}") from exc
