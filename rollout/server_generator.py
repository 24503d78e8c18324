"""Generation on vLLM servers (`engine.servers`), with the in-process Generator's contract.

Budgets, forced interruption, streaming and scoring are the shared `BaseGenerator`'s; this module
sends each sampling request to a server (rollout/server_pool.py picks it: least outstanding
work, a prompt's n rollouts on one server) through vLLM's token-in/token-out route
`/inference/v1/generate`, with the very SamplingParams the in-process engine uses. The server
labels every output token with the weight version it was sampled under (the version this client
sets with `/update_weight_version` while the server is paused), so per-token policy versions
are exact for requests that straddle an update. A request carries `cache_salt` = this client's
id and the policy version when it is sent, so one sent after an update never reuses KV blocks
computed under older weights (one sent before it is in flight: like a running request, it keeps
the KV it shares with its prompt's other rollouts, PipelineRL's behaviour).

Weights (`engine.weight_transfer: files`) are written once as safetensors shards into
`engine.weights_dir` (which every server must read), then each server pauses keeping its KV cache,
reloads in place, takes the new version label (checked with `/weight_info`) and resumes. Control
calls to a server that is up are retried (with backoff, within their timeout) before it is taken out
(rollout/server_pool.py). A server whose reload fails puts the previous files back and gets no
requests until it has the current ones; if no server takes an update it is WeightUpdateError and the
version is unchanged. A server that dies or hangs (its `/health` fails) has its requests issued
again elsewhere and rejoins (with backoff) with the current weights; a request that fails alone is
issued again and its server, healthy, keeps its place (rollout/server_pool.py, which also caps the
requests per server and orders them by `priority`). `nccl` drives vLLM's NCCL weight transfer over
every server's HTTP routes (one group, a rank offset per server): written against vLLM 0.32.

A LoRA run (`EngineConfig.lora`) publishes adapters instead, loaded on every server at run time;
each request names its version's adapter (rollout/server_lora.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse

from scalerl.envs.environment import EnvContext
from scalerl.rollout.base_generator import BaseGenerator, GeneratorUnavailable, Sampled
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.lora_adapters import Adapters
from scalerl.rollout.model_files import model_dir
from scalerl.rollout.scorer import Scorer
from scalerl.rollout.server_lora import ServerLora
from scalerl.rollout.server_pool import (
    RequestFailed,
    RequestRejected,
    Server,
    ServerError,
    ServerPool,
)
from scalerl.rollout.vllm_worker import ABORT_METHOD, INFO_METHOD, RELOAD_METHOD
from scalerl.rollout.weight_files import write_weights
from scalerl.rollout.weight_sync import ServersSyncClient
from scalerl.rollout.weights import (
    WeightUpdateError,
    checked_tensors,
    checkpoint_shapes,
    weights_root,
)

_ROLLOUT_SALT: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "server_rollout_salt", default=None)
"""The cache salt the running rollout's first phase was sent with (a rollout is a task of its
own): its continuation takes it, as in-process (rollout/engine.py)."""


def span_versions(spans: list[dict] | None, n: int, url: str) -> list[int]:
    """Per-token versions from a reply's weight-version spans; ServerError when a label is not
    a version this client set (the server lost its state, e.g. it restarted)."""
    versions: list[int] = []
    for span in spans or []:
        try:
            version = int(span["version"])
        except ValueError:
            raise ServerError(f"{url}: tokens labelled with weights {span['version']!r}, not a "
                              "version this client set (did the server restart?)") from None
        versions += [version] * (span["end"] - span["start"])
    if len(versions) != n:
        raise ServerError(f"{url}: weight-version spans cover {len(versions)} of {n} tokens")
    return versions


class ServerGenerator(ServerLora, BaseGenerator):
    """Scored rollouts from vLLM servers started with `scalerl serve` (or its command line)."""

    def __init__(self, model_path: str, *, config: EngineConfig, fp32_head: bool = True,
                 scorer: Scorer | None = None, tool_format: str = "auto",
                 env_context: EnvContext | None = None) -> None:
        if not config.servers:
            raise ValueError("ServerGenerator needs at least one URL in engine.servers")
        self.config = config
        super().__init__(model_path, max_model_len=config.max_model_len, fp32_head=fp32_head,
                         scorer=scorer, tool_format=tool_format, env_context=env_context)
        self._salt = uuid.uuid4().hex[:8]
        """This client's part of every cache salt: blocks cached for another client (e.g.
        another checkpoint on the same server) are never reused."""
        self._weights_root = weights_root(config.weights_dir, self.model_path, config.dtype,
                                          self)
        self._model_dir = model_dir(self.model_path)
        """The model's files (a hub id's cached snapshot): the servers must read them too."""
        self._loaded_dir = self._model_dir
        self._checkpoint_shapes: dict[str, tuple[int, ...]] | None = None
        self._adapters = (Adapters(config.lora, self._weights_root, self.model_path)
                          if config.lora is not None else None)
        """A LoRA run's adapters (None: full weights are published)."""
        self._user_paused = False
        self.reissued = 0
        """Requests issued again on another server after theirs failed."""
        self.pool: ServerPool | None = None
        try:
            self._call(self._start(), config.server_wait_s + 60, "connecting to the vLLM servers")
        except BaseException:
            self.close()
            raise

    async def _start(self) -> None:
        """Join every server (those that fail keep being retried); wait for one to be up."""
        self._gate = asyncio.Event()
        self._gate.set()
        self._weights_lock = asyncio.Lock()
        c = self.config
        self.pool = ServerPool(c.servers, join=self._join, timeout_s=c.server_timeout_s,
                               request_timeout_s=c.server_request_timeout_s,
                               wait_s=c.server_wait_s, max_requests=c.requests_per_server)
        await self.pool.start()
        await self.pool.wait_up()

    # ---- joining a server -------------------------------------------------------------------
    async def _check_precision(self, server: Server) -> None:
        """The server's LM head must run as this client's (the trainer's) does: asked of the
        server's own workers, not of the flags it was meant to get."""
        reply = await self.pool.call(server, "POST", "/collective_rpc",
                                     body={"method": INFO_METHOD})
        info = reply["results"][0]
        wanted = "float32" if self.fp32_head else self.config.dtype
        if info["head_dtype"] != wanted:
            fix = "--fp32-head" if self.fp32_head else "--no-fp32-head"
            raise ServerError(f"{server.url}: computes its LM head in {info['head_dtype']}, this "
                              f"run's in {wanted} (start it with scalerl serve {fix} --dtype "
                              f"{self.config.dtype})")
        self.engine_info = info

    async def _join(self, server: Server) -> None:
        """Make `server` serve this client: compatible settings, none of its stale requests, the
        current weights and version label, not paused (unless this client is)."""
        call = self.pool.call
        if server.joined and self.config.weight_transfer == "nccl":
            raise ServerError(f"{server.url}: lost mid-run; the nccl transport cannot bring a "
                              "server back into its group (weight_transfer: files can)")
        await call(server, "GET", "/health")
        model = (await call(server, "GET", "/v1/models"))["data"][0]
        if model["max_model_len"] < self.max_model_len:
            raise ServerError(f"{server.url}: serves max_model_len {model['max_model_len']} < "
                              f"engine.max_model_len {self.max_model_len} (start it with "
                              f"--max-model-len {self.max_model_len} or more)")
        await self._check_precision(server)
        # all its workers join the NCCL group, every data-parallel rank's too (vLLM's worker
        # rank is dp_rank x TP x PP + its rank): the world size with `include_dp`
        server.world_size = (await call(server, "GET", "/get_world_size",
                                        params={"include_dp": "true"}))["world_size"]
        if server.stale:
            await call(server, "POST", "/abort_requests", body={})
        await call(server, "POST", "/pause", params={"mode": "keep"})
        if self._adapters is not None:  # the base weights stay; the adapters in use are loaded
            return await self._join_lora(server, model["root"])
        label = (await call(server, "GET", "/weight_info"))["weight_version"]
        as_started = label == "default" and os.path.normpath(model["root"]) in (
            os.path.normpath(self.model_path), os.path.normpath(self._model_dir))
        while True:  # the reload runs outside the lock; an update meanwhile means another one
            loaded = self._loaded_dir
            if not (as_started and loaded == self._model_dir):
                await self._reload(server, loaded, self.config.server_request_timeout_s)
            async with self._weights_lock:
                if self._loaded_dir != loaded:
                    continue
                await self._label(server, self._version)
                if not self._user_paused:
                    await call(server, "POST", "/resume")
                return

    async def _reload(self, server: Server, directory: Path, timeout_s: float) -> None:
        await self.pool.control(server, "POST", "/collective_rpc", timeout_s=timeout_s, body={
            "method": RELOAD_METHOD, "kwargs": {"weights_path": str(directory)},
            "timeout": timeout_s})

    async def _label(self, server: Server, version: int) -> None:
        """Label the weights `version` (tokens sampled from now on carry it) and check it took."""
        await self.pool.control(server, "POST", "/update_weight_version",
                                body={"new_version": str(version)})
        label = (await self.pool.control(server, "GET", "/weight_info"))["weight_version"]
        if label != str(version):
            raise ServerError(f"{server.url}: /weight_info says {label!r} after setting "
                              f"version {version}")

    # ---- one sampling request ---------------------------------------------------------------
    async def _rollout(self, sample, group, prompt, *args, **kwargs):
        _ROLLOUT_SALT.set([])  # this rollout's task: its phases share the first one's salt
        with self.pool.affinity(tuple(prompt)):  # a prompt's rollouts share a server's cache
            return await super()._rollout(sample, group, prompt, *args, **kwargs)

    async def _sample(self, prompt: list[int], max_tokens: int, temperature: float,
                      seed: int | None, top_p: float = 1.0, priority: int = 0,
                      stop: tuple[str, ...] = ()) -> Sampled:
        params = {"n": 1, "temperature": temperature, "top_p": top_p, "top_k": 0,
                  "max_tokens": max_tokens, "logprobs": 0, "detokenize": False}
        if seed is not None:
            params["seed"] = seed
        if stop:  # matched on the server's detokenized text; the stop string stays in the tokens
            params |= {"stop": list(stop), "include_stop_str_in_output": True,
                       "detokenize": True}

        salts = _ROLLOUT_SALT.get()
        entered: list[int] = []  # the adapter version of the attempt in flight (LoRA runs)

        async def body() -> dict:
            """Once a slot is free: salted with the version it is sent under, or (a rollout's
            continuation) its first phase's salt, whose prompt and tokens the server cached."""
            await self._gate.wait()
            salt = salts[0] if salts else f"{self._salt}-v{self._version}"
            if salts is not None and not salts:
                salts.append(salt)
            request = {"token_ids": prompt, "sampling_params": params, "priority": priority,
                       "cache_salt": salt}
            if self._adapters is not None:  # the whole request runs under this adapter
                version, name = self._adapters.enter()
                entered.append(version)
                if name is not None:
                    request["model"] = name
            return request

        failures = 0
        while True:
            server = await self._usable_server()
            try:
                reply = await self.pool.generate(server, body, max_tokens, priority)
                return self._parsed(reply, server, entered[-1] if entered else None)
            except RequestFailed as exc:  # the server is healthy: only this request again
                error = exc
            except ServerError as exc:
                self.pool.lose(server, str(exc))
                error = exc
            finally:
                self._left(entered)
            failures += 1
            self.reissued += 1
            if failures > 3 * len(self.pool.servers):
                raise GeneratorUnavailable(f"a request failed {failures} times in a row; the "
                                           f"last: {error}") from error

    async def _usable_server(self) -> Server:
        """An up server, chosen while no weight update is under way (bounded wait)."""
        while True:
            await self._gate.wait()
            server = await self.pool.acquire()
            if self._gate.is_set():
                return server

    @staticmethod
    def _parsed(reply: dict, server: Server, adapter: int | None = None) -> Sampled:
        """A reply's tokens, their log-probs and versions (`adapter`: the LoRA version the
        request ran under, every token's; else the server's weight-version spans)."""
        choice = reply["choices"][0]
        if choice["finish_reason"] not in ("stop", "length"):
            raise ServerError(f"{server.url}: request ended with {choice['finish_reason']!r}")
        tokens = choice["token_ids"]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        versions = ([adapter] * len(tokens) if adapter is not None else
                    span_versions(choice["weight_versions"], len(tokens), server.url))
        server.sampled += len(tokens)
        details = (reply.get("usage") or {}).get("prompt_tokens_details") or {}
        return Sampled(tokens, logprobs, versions, choice["finish_reason"] == "stop",
                       details.get("cached_tokens") or 0)

    # ---- weights ----------------------------------------------------------------------------
    def update_weights(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """Write the weights once into `engine.weights_dir`, then load them on every up server
        in place (mid-generation is fine) and set the policy version.

        A server whose reload fails gets the previous version back and is out until it holds
        the current one; WeightUpdateError (version unchanged) when no server took the update.
        Servers that are out take it when they rejoin. Returns the slowest server's timings.
        """
        what = f"weight update to version {version}"
        if self._adapters is not None:
            raise WeightUpdateError(f"{what}: these servers serve a LoRA run's adapters "
                                    "(engine.lora); publish with update_adapter")
        target = self._weights_root / f"v{version:06d}"
        t = time.perf_counter()
        if self._checkpoint_shapes is None:
            self._checkpoint_shapes = checkpoint_shapes(self.model_path)
        named = checked_tensors(named_tensors, self._checkpoint_shapes, what, self.model_path)
        try:
            written = write_weights(named, target, dtype=self.config.dtype,
                                    chunk_mb=self.config.weight_chunk_mb)
        except (OSError, ValueError) as exc:
            raise WeightUpdateError(f"{what}: writing the weights failed: {exc}") from exc
        write_s = time.perf_counter() - t
        what += f" ({written.tensors} tensors, {written.bytes / 2**20:.1f} MiB)"
        try:
            timings = self._call(self._update_all(target, version, timeout_s, what),
                                 2 * timeout_s + 4 * self.config.server_timeout_s + 10, what)
        except (TimeoutError, WeightUpdateError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise WeightUpdateError(str(exc)) from exc
        return {"write_s": write_s, **timings}

    async def _update_all(self, target: Path, version: int, timeout_s: float,
                          what: str) -> dict[str, float]:
        """Every up server paused and reloaded, then the version set, then all resumed: no
        server samples from the new weights before this client labels new requests with them."""
        async with self._weights_lock:
            self._gate.clear()
            live = self.pool.up
            try:
                results = await asyncio.gather(*(self._update_one(s, target, version, timeout_s,
                                                                  what) for s in live))
                updated = [r for r in results if isinstance(r, dict)]
                kept = [(s, r) for s, r in zip(live, results, strict=True) if isinstance(r, str)]
                if kept and not updated:
                    raise WeightUpdateError(f"{what}: no server took it; version {self._version}"
                                            " was restored on " + "; ".join(r for _, r in kept))
                for server, reason in kept:  # behind: no new requests until it has `version`
                    self.pool.lose(server, reason, stale=False)
                old, self._loaded_dir, self._version = self._loaded_dir, target, version
                if old.parent == self._weights_root:
                    shutil.rmtree(old, ignore_errors=True)
            finally:
                t = time.perf_counter()
                if not self._user_paused:
                    await self._each("POST", "/resume", servers=live)
                    self._gate.set()
                resume_s = time.perf_counter() - t
        slowest = {k: max(r[k] for r in updated) for k in updated[0]} if updated else {}
        return slowest | {"resume_s": resume_s}

    async def _update_one(self, server: Server, target: Path, version: int, timeout_s: float,
                          what: str) -> dict[str, float] | str | None:
        """Pause `server` and reload it: timings when it took the update, the reason (str) when
        it failed and kept the previous version, None when it was lost (to rejoin later). A
        hung server's calls end when its health probe fails, not at their own timeouts."""
        times: dict[str, float] = {}
        try:
            t = time.perf_counter()
            await self.pool.tracked(server, self.pool.control(server, "POST", "/pause",
                                                              params={"mode": "keep"}))
            times["pause_s"] = time.perf_counter() - t
            t = time.perf_counter()
            try:
                await self.pool.tracked(server, self._reload(server, target, timeout_s))
            except (ServerError, RequestRejected) as exc:
                await self.pool.tracked(server, self._reload(server, self._loaded_dir, timeout_s))
                return f"{server.url}: {what} failed: {exc}"
            times["reload_s"] = time.perf_counter() - t
            await self.pool.tracked(server, self._label(server, version))
            return times
        except (ServerError, RequestRejected) as exc:
            self.pool.lose(server, f"{what}: {exc}")
            return None

    # ---- pausing, NCCL, the rest --------------------------------------------------------------
    def pause(self, timeout_s: float = 60.0) -> None:
        """Stop scheduling on every server; running requests keep their KV cache."""
        self._user_paused = True
        self._call(self._pause_all(timeout_s), 2 * timeout_s, "pausing the vLLM servers")

    async def _pause_all(self, timeout_s: float) -> None:
        self._gate.clear()
        await self._each("POST", "/pause", params={"mode": "keep"}, timeout_s=timeout_s)

    def resume(self, timeout_s: float = 60.0) -> None:
        async def go():
            await self._each("POST", "/resume", timeout_s=timeout_s)
            self._gate.set()
        self._user_paused = False
        self._call(go(), 2 * timeout_s, "resuming the vLLM servers")

    async def _each(self, method: str, path: str, servers: list[Server] | None = None,
                    **kwargs) -> None:
        """The call on every up server (or those of `servers` not lost) at once; a server that
        fails it is taken out."""
        live = self.pool.up if servers is None else [
            s for s in servers if s.up or not s.stale]
        results = await asyncio.gather(*(self.pool.control(s, method, path, **kwargs)
                                         for s in live), return_exceptions=True)
        for server, result in zip(live, results, strict=True):
            if isinstance(result, (ServerError, RequestRejected)):
                self.pool.lose(server, f"{method} {path}: {result}")

    def hold(self, timeout_s: float = 60.0) -> None:
        """Before an NCCL update: no new requests; every server paused keeping its KV cache."""
        self._call(self._pause_all(timeout_s), 2 * timeout_s, "pausing for a weight update")

    def release(self, version: int, timeout_s: float = 60.0) -> None:
        """After an NCCL update: every server labels its weights `version`, then resumes."""
        async def go():
            live = self.pool.up
            results = await asyncio.gather(*(self._label(s, version) for s in live),
                                           return_exceptions=True)
            for server, result in zip(live, results, strict=True):
                if isinstance(result, Exception):
                    self.pool.lose(server, f"labelling version {version}: {result}")
            self._version = version
            await self._each("POST", "/resume", timeout_s=timeout_s)
            self._gate.set()
        self._call(go(), 2 * timeout_s, "resuming after a weight update")

    def abort_weight_update(self, timeout_s: float = 60.0) -> None:
        """After a failed NCCL update: every up server ends its workers' open reload (layers
        that received nothing get their current weights back; rollout/vllm_worker.py)."""
        async def go():
            await asyncio.gather(*(self.pool.control(
                s, "POST", "/collective_rpc", timeout_s=timeout_s,
                body={"method": ABORT_METHOD, "timeout": timeout_s}) for s in self.pool.up))
        self._call(go(), 2 * timeout_s, "ending a failed weight update on the servers")

    def weight_sync_client(self, timeout_s: float = 300.0) -> ServersSyncClient:
        """vLLM's `VLLMWeightSyncClient` protocol over every server (for the NCCL transport).
        `timeout_s` (the publisher's) bounds each call: `/update_weights` answers only after the
        whole broadcast and load, minutes for an 8B model, far past `engine.server_timeout_s`."""
        return ServersSyncClient([(s.url, s.world_size) for s in self.pool.servers],
                                 timeout_s=timeout_s)

    def weight_sync_group(self) -> tuple[str, int]:
        """The NCCL group: this host's address as the servers reach it, and the world size
        (the trainer's sender plus every server's workers), once every configured server has
        joined and said its world size (`engine.server_wait_s` at most; ServerError naming each
        one missing)."""
        wait_s = self.config.server_wait_s
        self._call(self._all_sized(wait_s), wait_s + 30, "waiting for every vLLM server")
        host = urlparse(self.pool.servers[0].url).hostname or "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))  # no packet is sent: this only picks the route
            address = probe.getsockname()[0]
        return address, 1 + sum(s.world_size for s in self.pool.servers)

    async def _all_sized(self, wait_s: float) -> None:
        """Return once every server is up with a known world size; ServerError after `wait_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while missing := [s for s in self.pool.servers if not s.up or s.world_size is None]:
            if loop.time() >= deadline:
                raise ServerError(
                    "engine.weight_transfer = nccl needs every server in its NCCL group, but "
                    + "; ".join(f"{s.url} did not join with its /get_world_size ({s.reason})"
                                for s in missing)
                    + f" within {wait_s:.0f} s (engine.server_wait_s): start it, or remove it "
                    "from engine.servers")
            await asyncio.sleep(0.05)

    def engine_batch(self) -> int:
        """One server's running batch as this client knows it: `max_num_seqs` (1024, vLLM's
        default, when null), at most its `server_max_requests`."""
        return min(self.config.requests_per_server, self.config.max_num_seqs or 1024)

    def metrics(self) -> dict[str, float]:
        return self.pool.counts() | {"servers/reissued_total": float(self.reissued)}

    def close(self) -> None:
        if self.pool is not None:
            self._call(self.pool.close(), 30, "closing the server connections")
            self.pool = None
        shutil.rmtree(self._weights_root, ignore_errors=True)
        super().close()
