"""`EngineSyncClient`: vLLM's weight-transfer control calls on the in-process engine, blocking,
each under the generator's death watch and a timeout (`EngineGenerator._call`). It does not move
weights itself (rollout/weight_sync.py drives the transfer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scalerl.rollout.engine import EngineGenerator


class EngineSyncClient:
    """The four control calls of vLLM's weight transfer, on the in-process engine (blocking)."""

    def __init__(self, generator: EngineGenerator, timeout_s: float = 600.0):
        self.generator, self.timeout_s = generator, timeout_s

    def _run(self, name: str, *args):
        llm = self.generator._llm
        return self.generator._call(getattr(llm, name)(*args), self.timeout_s, name)

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
