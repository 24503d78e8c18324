"""The in-process engine's LoRA side (`EngineConfig.lora`): adapters published per version.

`EngineLora` is a part of `EngineGenerator` (rollout/engine.py): `update_adapter` writes a
published adapter (one folder per version, PEFT's layout) and loads it beside those in use with
vLLM's `add_lora` (never `load_inplace`: vllm #33791 re-reads it from disk every scheduler step);
`_lora_enter` / `_lora_leave` bracket one engine request, which runs to its end under the adapter
current when it was sent (its `LoRARequest`), so each of its tokens carries that version; an
adapter no request uses any more is removed (`remove_lora`) with its folder. No pause: generation
runs on through a publish. Version 0 is the base model (no adapter). The bookkeeping is
rollout/lora_adapters.py's; nothing is trained here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from scalerl.rollout.lora import adapter_id, adapter_name
from scalerl.rollout.lora_adapters import no_adapters
from scalerl.rollout.weights import WeightUpdateError

logger = logging.getLogger(__name__)


class EngineLora:
    """`update_adapter` and the per-request adapter of an `EngineGenerator` (its `_adapters`,
    `_lora_requests`, `_llm`, `_call`, `_step` and `_version`)."""

    def update_adapter(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """Publish a LoRA run's adapter as version `version` (PEFT-named tensors): written in
        PEFT's layout, one folder per version, loaded beside the adapters in use (`add_lora`);
        requests sent from now on sample under it, those in flight finish under theirs. No pause.
        A failure (bad names, the load failing or passing `timeout_s`) raises WeightUpdateError
        and leaves `version` unchanged. Returns timings (write_s, load_s)."""
        if self._adapters is None:
            raise no_adapters(version, "this engine was started")
        return self._adapters.update(named_tensors, version, lambda path, what: self._call(
            self._add_adapter(version, path, timeout_s, what), timeout_s + 10, what))

    async def _add_adapter(self, version: int, path: Path, timeout_s: float, what: str) -> float:
        from vllm.lora.request import LoRARequest

        t = time.perf_counter()
        request = LoRARequest(adapter_name(version), adapter_id(version), str(path))
        if not await self._step(self._llm.add_lora(request), timeout_s, f"{what}: loading it"):
            raise WeightUpdateError(f"{what}: vLLM did not load the adapter from {path}")
        self._lora_requests[version] = request
        self._version = version
        idle = self._adapters.publish(version, path)
        if idle:
            asyncio.ensure_future(self._retire(idle))
        return time.perf_counter() - t

    async def _retire(self, versions: list[int]) -> None:
        """Unload adapters no request uses any more (a failure is logged: vLLM's LRU cache of
        `max_cpu_loras` adapters evicts it in time) and remove their folders."""
        for version in versions:
            self._lora_requests.pop(version, None)
            try:
                await asyncio.wait_for(self._llm.remove_lora(adapter_id(version)), 60)
            except Exception as exc:  # noqa: BLE001 - logged, the cache evicts it in time
                logger.warning(
                    "unloading LoRA adapter scalerl-v%d failed: %s", version, exc)
            finally:
                self._adapters.retired(version)

    def adapters(self) -> dict[int, int]:
        """A LoRA run's loaded adapter versions and the requests in flight under each."""
        async def read():
            if self._adapters is None:
                return {}
            return {v: self._adapters.in_use().get(v, 0)
                    for v in sorted(self._adapters.loaded())}
        return self._call(read(), 30, "reading the loaded adapters")

    def _lora_enter(self) -> tuple[int, object | None]:
        """A request starts: (its version, the LoRARequest it runs under; None: the base)."""
        version, _ = self._adapters.enter()
        return version, self._lora_requests.get(version)

    def _lora_leave(self, version: int) -> None:
        """A request under `version` ended: retire the adapters no request uses any more."""
        if idle := self._adapters.leave(version):
            asyncio.ensure_future(self._retire(idle))
