"""Publishing a LoRA run's adapter to the generator (`EngineConfig.lora` set): the publisher for
every LoRA run, whatever `engine.weight_transfer` says.

Only the adapter moves: `publish` hands the PEFT-named adapter tensors (`get_peft_model_state_dict`)
to the generator's `update_adapter`, which writes them in PEFT's layout (one folder per version)
and loads them beside the adapters in use (rollout/lora_adapters.py; the servers' generator loads
them on every server). Same contract as `FilesPublisher` (trainer/publish.py): versions must grow,
the whole call is bounded, a failed publish raises PublishError (the generator keeps its version)
and a timed-out one leaves the publisher unusable. The adapter travels in fp32 (the trainer's
dtype for it; vLLM casts it to its own `lora_dtype` as it loads). `full_model_bytes` is what a
full-weights publish of the same model moves, for the metrics beside the adapter's bytes. No
training happens here.
"""

from __future__ import annotations

from typing import Any

import torch

from scalerl.trainer.publish import FilesPublisher


class LoraPublisher(FilesPublisher):
    """Publish a LoRA run's adapter through the generator's `update_adapter`."""

    transport = "lora"
    method = "update_adapter"
    sends = "adapter"

    def __init__(self, generator: Any, *, timeout_s: float = 300.0):
        super().__init__(generator, timeout_s=timeout_s)
        self.dtype = None  # the adapter is sent as the trainer holds it (fp32)
        self.bound_s = 2 * timeout_s + 60
        """The whole call's bound: write + load (each server's, at once), each bounded."""
        self._full_bytes: int | None = None

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """An adapter tensor as it is written: a host copy of its own (never a view the trainer
        goes on updating)."""
        t = tensor.detach()
        return t.to("cpu", copy=True).contiguous() if t.device.type != "cpu" else t.clone()

    @property
    def full_model_bytes(self) -> int:
        """Bytes a full-weights publish of the base model moves (its checkpoint in the engine's
        dtype): the figure the adapter's bytes compare with."""
        if self._full_bytes is None:
            from scalerl.rollout.weights import weights_bytes

            config = self.generator.config
            self._full_bytes = weights_bytes(self.generator.model_path, config.dtype)
        return self._full_bytes
