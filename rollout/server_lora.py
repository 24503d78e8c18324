"""The servers' LoRA side (`EngineConfig.lora`): adapters published per version on every server.

`ServerLora` is a part of `ServerGenerator` (rollout/server_generator.py). Servers are started with
`--enable-lora --max-loras --max-cpu-loras --max-lora-rank` and VLLM_ALLOW_RUNTIME_LORA_UPDATING
(rollout/server_command.py; `scalerl serve --lora-rank`). `update_adapter` writes the adapter once
into `engine.weights_dir` (one folder per version, PEFT's layout; every server must read it) and
loads it on every up server with `/v1/load_lora_adapter` (never `load_inplace`, vllm #33791). A
server with several data-parallel engines loads it on each: vLLM 0.32's `add_lora` is a utility
call on every engine core (vllm/v1/engine/core_client.py, DPLBAsyncMPClient), and a request names
its adapter's path too. Each request names its version's adapter in the token route's `model`
field and runs to its end under it, so every token it samples carries that version (servers are
not paused; their weight label stays `default`). A server that fails the load is taken out; when
it rejoins (a restarted local server too) it loads every adapter a request may still name before
it takes requests. An adapter no request uses any more is unloaded from every server
(`/v1/unload_lora_adapter`; vLLM then evicts it from its cache of `max_cpu_loras`) and its folder
removed. The bookkeeping is rollout/lora_adapters.py's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from scalerl.rollout.lora import adapter_name
from scalerl.rollout.lora_adapters import no_adapters
from scalerl.rollout.server_pool import RequestRejected, Server, ServerError
from scalerl.rollout.weights import WeightUpdateError

logger = logging.getLogger(__name__)


class ServerLora:
    """`update_adapter`, joining a server with the adapters in use, and the per-request adapter
    of a `ServerGenerator` (its `_adapters`, `pool`, `_weights_lock`, `_call` and `_version`)."""

    async def _join_lora(self, server: Server, root: str) -> None:
        """Join a LoRA run's server (paused): it must serve the base model unchanged (its
        weight label `default`), then load every adapter a request may still name."""
        label = (await self.pool.call(server, "GET", "/weight_info"))["weight_version"]
        if label != "default":
            raise ServerError(f"{server.url}: its weights were replaced (label {label!r}); a "
                              f"LoRA run needs the base model {self.model_path} as started")
        async with self._weights_lock:
            models = await self.pool.call(server, "GET", "/v1/models")
            have = {card["id"] for card in models["data"] if card["id"] != root}
            for version, path in sorted(self._adapters.loaded().items()):
                if adapter_name(version) not in have:
                    await self._load_adapter(server, version, path,
                                             self.config.server_request_timeout_s)
            if not self._user_paused:
                await self.pool.call(server, "POST", "/resume")

    async def _load_adapter(self, server: Server, version: int, path: Path,
                            timeout_s: float) -> None:
        try:
            await self.pool.control(server, "POST", "/v1/load_lora_adapter", timeout_s=timeout_s,
                                    body={"lora_name": adapter_name(version),
                                          "lora_path": str(path)}, text=True)
        except RequestRejected as exc:
            raise ServerError(f"{server.url}: loading LoRA adapter {adapter_name(version)} from "
                              f"{path} failed: {exc} (started with --enable-lora and "
                              "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True? scalerl serve --lora-rank "
                              "does both)") from exc

    def _left(self, entered: list[int]) -> None:
        """The attempt that sampled under adapter version `entered` ended: retire what no
        request uses any more."""
        if self._adapters is not None and entered:
            idle = self._adapters.leave(entered.pop())
            if idle:
                asyncio.ensure_future(self._unload(idle))

    def update_adapter(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """Publish a LoRA run's adapter as version `version`: written once into
        `engine.weights_dir`, loaded on every up server; requests sent from then on name it,
        those in flight finish under theirs. A server that fails the load is taken out (it
        loads the adapters in use when it rejoins); WeightUpdateError (version unchanged) when
        none took it. Returns timings (write_s; load_s, the slowest server's)."""
        if self._adapters is None:
            raise no_adapters(version, "these servers were joined")
        bound_s = timeout_s + 2 * self.config.server_timeout_s + 10
        return self._adapters.update(named_tensors, version, lambda path, what: self._call(
            self._load_all(version, path, timeout_s, what), bound_s, what))

    async def _load_all(self, version: int, path: Path, timeout_s: float, what: str) -> float:
        """Load the adapter on every up server at once, then make it current."""
        t = time.perf_counter()
        async with self._weights_lock:
            live = self.pool.up
            results = await asyncio.gather(*(self.pool.tracked(s, self._load_adapter(
                s, version, path, timeout_s)) for s in live), return_exceptions=True)
            failed = [(s, r) for s, r in zip(live, results, strict=True)
                      if isinstance(r, BaseException)]
            if len(failed) == len(live):
                raise WeightUpdateError(f"{what}: no server loaded it; version {self._version} "
                                        "stays: " + "; ".join(str(r) for _, r in failed))
            for server, reason in failed:  # rejoins with every adapter in use
                self.pool.lose(server, f"{what}: {reason}")
            self._version = version
            idle = self._adapters.publish(version, path)
        if idle:
            asyncio.ensure_future(self._unload(idle))
        return time.perf_counter() - t

    async def _unload(self, versions: list[int]) -> None:
        """Unload adapters no request uses any more from every up server (a failure is logged:
        vLLM's cache of `max_cpu_loras` adapters evicts it in time) and remove their folders."""
        for version in versions:
            for server in self.pool.up:
                try:
                    await self.pool.call(server, "POST", "/v1/unload_lora_adapter",
                                         body={"lora_name": adapter_name(version)}, text=True)
                except (ServerError, RequestRejected) as exc:
                    logger.warning("%s: unloading LoRA adapter %s failed: %s", server.url,
                                   adapter_name(version), exc)
            self._adapters.retired(version)

    def adapters(self) -> dict[int, int]:
        """A LoRA run's loaded adapter versions and the requests in flight under each."""
        async def read():
            if self._adapters is None:
                return {}
            return {v: self._adapters.in_use().get(v, 0)
                    for v in sorted(self._adapters.loaded())}
        return self._call(read(), 30, "reading the loaded adapters")

