"""How the vLLM engine is started (`EngineConfig`), and how much memory it holds.

Memory is always explicit: KV-cache GiB and the host/GPU memory share are fields, never vLLM's
defaults. `servers` switches generation from an engine in this process to vLLM servers
(rollout/server_generator.py); a server is started with the same arguments
(rollout/server_command.py translates `vllm_kwargs`). `process_tree_rss_mb` reports a process's
resident memory with its descendants (the engine core and workers). No engine is started here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from scalerl.rollout.lora import LoraServing
from scalerl.rollout.vllm_worker import WORKER_EXTENSION

TOOL_FORMATS: tuple[str, ...] = ("auto", "chat", "plain")
"""`EngineConfig.tool_format`'s values (envs/tool_format.py's formats, and `auto`)."""

WORKER_SHUTDOWN_GRACE_S = 30
"""VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS for the engine's workers (vLLM's default 5 s): how long a
worker may take to exit at shutdown before it is sent SIGTERM. Idle workers took 4-5 s here on
2 cores (rollout/engine.py's SHUTDOWN_GRACE_S says why that matters)."""


@dataclass(frozen=True)
class EngineConfig:
    """How the vLLM engine is started. Memory is always explicit."""

    dtype: str = "float32"
    """Weights/activations dtype: float32, bfloat16 or float16."""
    kv_cache_gib: float | None = 1.0
    """KV-cache space in GiB per engine GPU (on CPU VLLM_CPU_KVCACHE_SPACE, whole GiB, rounded
    up; on GPU vLLM's kv_cache_memory_bytes). None (GPUs only): what the engine's GPU has left,
    `memory_fraction` of it less the weights and the engine's runtime, as a training run sizes
    it from the GPU (scalerl/planning/engine_settings.py); an engine started outside a run
    leaves it to vLLM's own profiling."""
    memory_fraction: float = 0.1
    """vLLM gpu_memory_utilization (on CPU it applies to host memory)."""
    max_model_len: int = 1024
    """Longest prompt + completion, in tokens."""
    max_num_seqs: int | None = 256
    """Most sequences scheduled at once. None: what the KV cache holds at the run's expected
    context (a training run sizes it; outside one, vLLM's default)."""
    max_num_batched_tokens: int | None = None
    """Tokens per engine step; default max(4096, max_model_len) (vLLM's CPU default for LLM)."""
    seed: int = 0
    """Engine seed (requests carry their own per-rollout seeds)."""
    enforce_eager: bool = False
    """Skip torch.compile / CUDA graphs (faster start-up, slower steps)."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (phase 2 of an interrupted rollout)."""
    tensor_parallel_size: int = 1
    """GPUs one engine spans (vLLM tensor parallelism)."""
    data_parallel_size: int | None = 1
    """vLLM engines a training run starts on its node, each on `tensor_parallel_size` GPUs of
    its own: 1 is one engine in rank 0's process; more are local vLLM servers the run starts,
    generates on (as with `servers`) and stops (rollout/local_servers.py). None: as many as the
    GPUs the trainer ranks leave hold (one on CPU). Ignored with `servers`."""
    devices: tuple[int, ...] | None = None
    """GPUs the engines generate on (vLLM's CUDA_VISIBLE_DEVICES), as indices among the GPUs the
    run sees, `tensor_parallel_size` per engine; the trainer ranks take the others. None: the
    GPUs after the trainer ranks' when the node has them to spare, else the first ones, one
    engine shared with trainer ranks (the start-up line says so). Ignored on CPU."""
    chunked_prefill: bool | None = None
    """Split long prompt prefills across steps. None: on for an engine on GPUs (vLLM's default;
    turning it off there prints a warning that the engine may crash or give wrong outputs),
    off on CPU (vllm-cpu 0.32 crashes when a seeded request is prefilled in chunks)."""
    weight_chunk_mb: int = 512
    """Most MiB of one weights shard when new policy weights are handed to the engine (written in
    the engine's dtype with one host copy; a decoder layer is never split across shards)."""
    weight_transfer: Literal["files", "nccl"] = "files"
    """How new policy weights reach the engine: `files` (safetensors shards the engine reloads
    in place; CPU and GPU) or `nccl` (vLLM's NCCL weight transfer, GPUs only: the engine must
    not share a GPU with trainer rank 0)."""
    weight_timeout_s: float = 300.0
    """Most seconds each step of publishing new weights may take (write, pause, reload, resume;
    an NCCL broadcast with its load, a server's `/update_weights`): minutes for an 8B model. A
    publish that fails or runs past it stops a training run with a checkpoint (`--resume`
    continues, and may change this value)."""
    start_timeout_s: float = 600.0
    """Most seconds the in-process engine, or each local server (`data_parallel_size`), may take
    to start (load the weights, profile, build the KV cache; CUDA graphs on a GPU): a large model
    from slow storage needs more."""
    weights_dir: str | None = None
    """Where new policy weights are staged for the engine to reload (None: /dev/shm when it has
    room for two versions of them, else the system's temp dir). Servers on other machines need
    a directory they can read (shared storage)."""
    servers: tuple[str, ...] = ()
    """URLs of vLLM servers to generate on (`scalerl serve`), e.g. `http://10.0.0.5:8000`;
    empty: one engine in this process. Requests go to the server with the least outstanding
    work, the n rollouts of a prompt to one server; the servers must read `weights_dir`."""
    server_timeout_s: float = 30.0
    """Timeout of every control call to a server (health, pause, reload, resume, version) and of
    a generation request's connect; a server that does not answer its health probe (every 2 s)
    within it is treated as hung: taken out, its requests issued elsewhere."""
    server_request_timeout_s: float = 1800.0
    """Most seconds a generation request may go without its reply once sent to a server (time
    waiting in this client for one of the server's `server_max_requests` slots not counted).
    Then the server's /health is probed: one that answers keeps its place and its other
    requests, and only this request is issued again; one that does not is taken out."""
    server_max_requests: int | None = None
    """Most generation requests in flight on one server at once; the others wait in this client,
    lowest priority first. None: 2 x max_num_seqs (a full batch running and one waiting on the
    server), 2 x 1024 when max_num_seqs is null (vLLM 0.32's default for an API server on an
    H100/H200: vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults)."""
    tool_format: str = "auto"
    """How tool calls of multi-turn tasks are written and answered (envs/tool_format.py): `chat`
    (the chat template's tools, e.g. Qwen3's `<tool_call>` answered by `tool` messages), `plain`
    (a fenced python block stopped at ```output, answered by the output), `auto` (chat when the
    tokenizer's template renders tools, else plain)."""
    log_stats: bool = False
    """vLLM's own statistics: its periodic throughput log lines and, on a server, the Prometheus
    gauges at `/metrics` (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
    `vllm:kv_cache_usage_perc`, ...) that a cluster's monitoring scrapes. Off by default (a
    little CPU per engine step)."""
    local_server_restarts: int = 3
    """Times each of a run's local servers (`data_parallel_size` > 1) is started again after it
    died (it rejoins with the current weights; `files` transfer only); after that it is given up
    on with an error naming it, and the run stops with a checkpoint once none is left."""
    server_wait_s: float = 300.0
    """How long generation waits for a usable server when none is left before giving up (a
    training run then writes a checkpoint and stops; `--resume` continues)."""
    lora: LoraServing | None = None
    """Set by a LoRA run's glue from `policy.lora` and `offpolicy.max_lag` (not a recipe field):
    the engine serves the run's adapters (rollout/lora.py) and publishes move only them."""

    @property
    def batched_tokens(self) -> int:
        return self.max_num_batched_tokens or max(4096, self.max_model_len)

    def vllm_kwargs(self, model: str, *, fp32_head: bool, gpu: bool | None = None) -> dict:
        """vLLM engine arguments for `model` (AsyncEngineArgs / `vllm.LLM`): the Generator's
        engine, `scalerl serve`'s server and `scalerl bench rollout`'s bare baseline start from
        the same ones. `fp32_head` (the policy's setting, `policy.fp32_head`) runs the LM head in
        FP32; `gpu` says where the engine runs (None: a GPU if this machine has one)."""
        if gpu is None:
            import torch

            gpu = torch.cuda.is_available()
        kwargs = dict(
            model=model, dtype=self.dtype, max_model_len=self.max_model_len,
            gpu_memory_utilization=self.memory_fraction, seed=self.seed,
            enforce_eager=self.enforce_eager, enable_prefix_caching=self.enable_prefix_caching,
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.batched_tokens,
            tensor_parallel_size=self.tensor_parallel_size, logprobs_mode="processed_logprobs",
            hf_overrides={"head_dtype": "float32"} if fp32_head else {},
            disable_log_stats=not self.log_stats,
            # An older prompt's requests and a rollout's continuation first (their priorities:
            # rollout/base_generator.py); vLLM 0.32 SchedulerConfig.policy, default "fcfs".
            scheduling_policy="priority",
            worker_extension_cls=WORKER_EXTENSION,  # in-place reloads that refresh tied heads
            # Per-request seeds crash vllm-cpu 0.32 when a seeded prompt is prefilled in chunks
            # ("CPU Generator does not use offset"); whole-prompt prefills avoid it there.
            enable_chunked_prefill=gpu if self.chunked_prefill is None else self.chunked_prefill,
            # on CPU the KV cache is VLLM_CPU_KVCACHE_SPACE (process_env)
            kv_cache_memory_bytes=(int(self.kv_cache_gib * 2**30)
                                   if gpu and self.kv_cache_gib is not None else None),
        )
        if not gpu and self.kv_cache_gib is None:
            raise ValueError("engine.kv_cache_gib = null sizes the KV cache from a GPU's memory; "
                             "on CPU give it in GiB (e.g. --set engine.kv_cache_gib=1)")
        if self.weight_transfer == "nccl":
            kwargs["weight_transfer_config"] = {"backend": "nccl"}
        if self.lora is not None:
            kwargs.update(self.lora_kwargs())
        return kwargs

    def lora_kwargs(self) -> dict:
        """vLLM's LoRA arguments for `lora`: `max_loras` adapters in a batch at once, one more
        kept loaded (`max_cpu_loras`: a new version loads while `max_loras` older ones finish
        their requests), of rank up to `serving_rank`. vllm-cpu serves them with
        PunicaWrapperCPU and turns compilation off (vllm/platforms/cpu.py)."""
        lora = self.lora
        return {"enable_lora": True, "max_loras": lora.max_loras,
                "max_cpu_loras": lora.max_loras + 1, "max_lora_rank": lora.serving_rank}

    @property
    def kv_cache_space_cpu(self) -> int:
        return max(1, math.ceil(self.kv_cache_gib or 1))

    def process_env(self) -> dict[str, str]:
        """Environment variables the engine's processes need, set before it starts (on CPU the
        KV cache is VLLM_CPU_KVCACHE_SPACE, whole GiB). The workers get WORKER_SHUTDOWN_GRACE_S
        to exit at shutdown unless the environment says otherwise."""
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_cpu),
                "VLLM_LOGGING_STREAM": os.environ.get("VLLM_LOGGING_STREAM", "ext://sys.stderr"),
                "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": os.environ.get(
                    "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", str(WORKER_SHUTDOWN_GRACE_S))}

    @property
    def requests_per_server(self) -> int:
        """`server_max_requests`, or its default from `max_num_seqs`."""
        return self.server_max_requests or 2 * (self.max_num_seqs or 1024)

    @property
    def local_servers(self) -> int:
        """Local vLLM servers a run starts for itself (0: an engine in its process, or
        `servers` elsewhere)."""
        n = self.data_parallel_size or 1
        return 0 if self.servers or n == 1 else n

    def __post_init__(self) -> None:
        if self.weight_chunk_mb <= 0:
            raise ValueError(f"EngineConfig.weight_chunk_mb must be > 0, got "
                             f"{self.weight_chunk_mb}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"EngineConfig.dtype {self.dtype!r}; valid: float32, bfloat16, "
                             "float16")
        if not 0 < self.memory_fraction <= 1 or (self.kv_cache_gib is not None
                                                 and self.kv_cache_gib <= 0):
            raise ValueError(f"EngineConfig needs 0 < memory_fraction <= 1 and kv_cache_gib > 0 "
                             f"(or null), got {self.memory_fraction} and {self.kv_cache_gib}")
        for name, low in (("max_num_seqs", 1), ("data_parallel_size", 1),
                          ("server_max_requests", 1), ("local_server_restarts", 0)):
            value = getattr(self, name)
            if value is not None and value < low:
                null = " or null" if name != "local_server_restarts" else ""
                raise ValueError(f"EngineConfig.{name} must be >= {low}{null}, got {value}")
        for url in self.servers:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"EngineConfig.servers: {url!r} is not a URL; valid: "
                                 "http://HOST:PORT or https://HOST:PORT")
        if len(set(self.servers)) != len(self.servers):
            raise ValueError(f"EngineConfig.servers lists a server twice: {list(self.servers)}")
        if self.tool_format not in TOOL_FORMATS:
            raise ValueError(f"EngineConfig.tool_format {self.tool_format!r}; valid: "
                             f"{', '.join(TOOL_FORMATS)}")
        for name in ("weight_timeout_s", "start_timeout_s", "server_timeout_s",
                     "server_request_timeout_s", "server_wait_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EngineConfig.{name} must be > 0, got {getattr(self, name)}")


def process_tree_rss_mb(pid: int | None = None,
                        children: list[int] | None = None) -> dict[str, float]:
    """Resident memory (MiB) of a process and of all its descendants (or of the `children` pids
    given instead, e.g. one engine's processes when two engines share the parent)."""
    import psutil

    proc = psutil.Process(pid)
    children = (proc.children(recursive=True) if children is None
                else [psutil.Process(c) for c in children])
    kids = 0
    for child in children:
        try:
            kids += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    main = proc.memory_info().rss
    return {"main_mb": main / 2**20, "children_mb": kids / 2**20,
            "total_mb": (main + kids) / 2**20, "processes": 1 + len(children)}
