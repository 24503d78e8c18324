"""vLLM's weight-sync control calls for the NCCL weight transfer (`engine.weight_transfer: nccl`,
driven by trainer/publish.py): fanned out to several vLLM servers (`ServersSyncClient`), or made
on the in-process engine (`EngineSyncClient`, each call under the generator's death watch).

Each server gets vLLM's own `HTTPVLLMWeightSyncClient`, all called at once; the workers of
server i join the NCCL group at rank offset 1 + the world sizes of the servers before it (the
trainer's sender is rank 0). Written against vLLM 0.32; the NCCL group itself needs GPUs. No
tensors here (vLLM's trainer engine broadcasts them).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class ServersSyncClient:
    """vLLM's weight-sync control calls fanned out to every server at once (vLLM's own
    `HTTPVLLMWeightSyncClient` per server). The workers of server i join the NCCL group at rank
    offset 1 + the world sizes of the servers before it; the trainer's sender is rank 0."""

    def __init__(self, servers: list[tuple[str, int]], timeout_s: float = 300.0):
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient

        self.clients = [HTTPVLLMWeightSyncClient(url, timeout=timeout_s) for url, _ in servers]
        self.offsets = [1 + sum(size for _, size in servers[:i]) for i in range(len(servers))]

    def _each(self, calls) -> None:
        pool = ThreadPoolExecutor(max_workers=len(calls))
        try:
            for future in [pool.submit(fn, *args) for fn, *args in calls]:
                future.result()
        finally:  # a worker blocked in NCCL must not turn an error into a hang
            pool.shutdown(wait=False)

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._each([(c.init_weight_transfer_engine, {**init_info, "rank_offset": offset})
                    for c, offset in zip(self.clients, self.offsets, strict=True)])

    def start_weight_update(self) -> None:
        self._each([(c.start_weight_update,) for c in self.clients])

    def update_weights(self, update_info: dict) -> None:
        self._each([(c.update_weights, update_info) for c in self.clients])

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._each([(c.finish_weight_update, weight_version) for c in self.clients])


class EngineSyncClient:
    """The four control calls of vLLM's weight transfer, on the in-process engine (blocking):
    `llm` is its AsyncLLM, `call(coroutine, timeout_s, what)` the generator's death-watched wait
    (`EngineGenerator._call`)."""

    def __init__(self, llm: Any, call: Callable[[Any, float, str], Any],
                 timeout_s: float = 600.0):
        self.llm, self.call, self.timeout_s = llm, call, timeout_s

    def _run(self, name: str, *args):
        return self.call(getattr(self.llm, name)(*args), self.timeout_s, name)

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        self._run("init_weight_transfer_engine", WeightTransferInitRequest(init_info=init_info))

    def start_weight_update(self) -> None:
        self._run("start_weight_update")

    def update_weights(self, update_info: dict) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        self._run("update_weights", WeightTransferUpdateRequest(update_info=update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._run("finish_weight_update", weight_version)
