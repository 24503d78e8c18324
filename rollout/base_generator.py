"""What every generator does the same way, whatever serves the tokens: budgets, scoring, streaming.

`BaseGenerator` turns samples into scored Rollouts: it renders prompts with the tokenizer's chat
template (each task's system prompt), runs each rollout in at most two sampling requests under
its length budget (forced interruption in between: rollout/turn.py, rollout/budget.py), scores
each completion as soon as it finishes with the scorer it was handed (the run's Task objects and
grading settings, rollout/scorer.py), and streams rollouts back in finish order from a
background event loop. A prompt that cannot fit its longest completion in `max_model_len` is not
sent: its n rollouts come back at once with finish reason `prompt_too_long`. Subclasses supply
one sampling request (`_sample`) and the weights/pause/close side: rollout/engine.py (vLLM in
this process) and the HTTP servers' generator. Nothing here knows vLLM.

A task with an environment (`Task.environment`, envs/environment.py) is played in turns by
rollout/episode.py, on both backends alike, through the generator's public turn interface
(`sample`, `phrase_ids`, `think_close`, `version`, `system_prompt`, `judge`, `render`:
rollout/turn.py `Backend`). The run's `EnvContext` (its tool format, chosen by the `tool_format`
setting, `auto` | `chat` | `plain`; a source of sandboxed tool sessions made at the first tool
call; the grading settings) is handed in by the caller, built once per run (envs/context.py
`run_context`), or built from the scorer's grading at the first such rollout; its prompts are
rendered with the environment's tool schemas when the format shows them. Such a prompt is
refused unsent only when its first turn cannot fit `max_model_len` (later turns that would not
fit end the episode, `truncated`). An environment that is `played_elsewhere` (a verifiers
taskset's) gets the whole episode instead, on the servers' generator (rollout/external.py).

Priorities: every sampling request carries a vLLM priority (lower = scheduled earlier; the engine
runs vLLM's `priority` scheduling policy, ties go to the earlier arrival). A call's `priority`
argument p (PipelineRL passes the prompt's admission sequence number, so an older prompt has a
smaller p; other callers leave 0) maps to `2p` for a rollout's first phase and `2p - 1` for its
continuation after a forced interruption (`phase_priority`): requests are ordered by (prompt age,
continuation first), so a continuation goes ahead of the first phases of its own and every newer
prompt, and any request of an older prompt goes ahead of those of newer ones. The default p = 0
sends first phases at vLLM's default priority 0.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from scalerl.envs.base import Sample, Score
from scalerl.envs.environment import EnvContext, Environment
from scalerl.rollout import episode as E
from scalerl.rollout import external as X
from scalerl.rollout import turn as T
from scalerl.rollout.admission import Bound, Lane, lane_scope
from scalerl.rollout.engine_config import process_tree_rss_mb
from scalerl.rollout.scorer import Scorer
from scalerl.rollout.types import Budget, Rollout

UNSCORED = T.UNSCORED
_END = object()
ENV_WORKERS = 64
"""Threads for environment calls (tool calls) at least: one per rollout waiting on its tool,
so a slow call delays only its own rollout (more when the backend decodes more at once)."""
phase_priority = T.phase_priority


class GeneratorUnavailable(RuntimeError):
    """The generator cannot serve now (e.g. no vLLM server answered for `engine.server_wait_s`);
    nothing it returned is lost, so a training run checkpoints and stops, and resumes later."""


class EngineStartTimeout(GeneratorUnavailable):
    """The in-process engine did not start within `engine.start_timeout_s`: its processes were
    stopped, and a training run ends as its other stops do (one line, exit 75)."""


class EngineDied(GeneratorUnavailable):
    """The in-process engine's own processes are gone (killed, out of memory, a crash in a
    kernel): nothing more can be generated in this process; a training run checkpoints and
    stops, and `--resume` starts a fresh engine."""


@dataclass
class Sampled:
    """What one sampling request returned."""

    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    """Policy version of each sampled token."""
    ended: bool
    """True when it stopped on EOS (not on its token limit)."""
    cached: int = 0
    """Prompt tokens the engine took from its prefix cache."""


class BaseGenerator:
    """Scored rollouts from some sampling backend, driven on a background event loop."""

    def __init__(self, model_path: str, *, max_model_len: int, fp32_head: bool = True,
                 scorer: Scorer | None = None, tool_format: str = "auto",
                 env_context: EnvContext | None = None) -> None:
        from transformers import AutoTokenizer

        self.model_path = str(model_path)
        self.max_model_len = max_model_len
        self.fp32_head = fp32_head
        """LM head in FP32 asked for (the policy's `fp32_head`); what runs is `engine_info`."""
        self.engine_info: dict = {}
        """What the engine really computes with, read back from it (rollout/vllm_worker.py
        `engine_info`: head_dtype, dtype, max_model_len); set once it has started."""
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.think_close = tuple(self.tokenizer.encode("</think>", add_special_tokens=False))
        """The tokens of `</think>`: where a rollout's thinking ends."""
        self._phrases: dict[str, tuple[int, ...]] = {}
        self._version = 0
        self._sampled_total = 0
        self.scorer = scorer
        """The run's tasks and grading settings: system prompts and verdicts (None: none yet;
        generating then raises)."""
        self.tool_format = tool_format
        """The tool-call convention of tasks with an environment: auto | chat | plain."""
        self._env_context: EnvContext | None = env_context
        self._owns_context = env_context is None
        """Its sessions are closed with the generator only when it built the context itself."""
        self._env_pool: ThreadPoolExecutor | None = None
        self._env_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="generator-loop",
                                        daemon=True)
        self._thread.start()

    # ---- what a subclass supplies ---------------------------------------------------------
    async def _sample(self, prompt: list[int], max_tokens: int, temperature: float,
                      seed: int | None, top_p: float = 1.0, priority: int = 0,
                      stop: tuple[str, ...] = ()) -> Sampled:
        """One sampling request: up to `max_tokens` tokens after `prompt` (nucleus sampling
        with `top_p` < 1: evaluation protocols only; training samples the full distribution),
        scheduled with vLLM priority `priority` (lower = earlier; `phase_priority`), ending at
        EOS or at one of the `stop` strings (kept in the tokens; `ended` True)."""
        raise NotImplementedError

    def progress(self) -> int:
        """A count that grows while generation makes progress: tokens of finished sampling
        requests (a subclass that can see running requests adds their tokens so far). PipelineRL
        reads it to tell a slow batch from a stalled generator."""
        return self._sampled_total

    def concurrency(self) -> int | None:
        """Sequences the backend decodes at once (all its engines), None when unknown."""
        return None

    def engine_batch(self) -> int | None:
        """Sequences one engine (one server) runs at once, what a lane's share is of; None
        when unknown (a lane then bounds nothing)."""
        return self.concurrency()

    def _bound(self, lane: Lane | None) -> Bound | None:
        batch = self.engine_batch() if lane is not None else None
        return None if lane is None or batch is None else Bound(lane.name, lane.limit(batch))

    def update_weights(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        raise NotImplementedError

    def update_adapter(self, named_tensors: Iterable, version: int, *,
                       timeout_s: float = 60.0) -> dict[str, float]:
        """A LoRA run's publish (`EngineConfig.lora`): load adapter version `version` (PEFT-named
        tensors) beside those in use; requests sent from then on sample under it, each request
        under one adapter to its end (rollout/lora_adapters.py). Returns timings."""
        raise NotImplementedError

    def pause(self, timeout_s: float = 60.0) -> None:
        raise NotImplementedError

    def resume(self, timeout_s: float = 60.0) -> None:
        raise NotImplementedError

    def memory(self) -> dict[str, float]:
        """Resident memory of this process and its children (an in-process engine's core and
        workers; a server's memory is its own to report), in MiB."""
        return process_tree_rss_mb()

    def metrics(self) -> dict[str, float]:
        """The backend's own counters for the training metrics (servers: up, lost, reissued)."""
        return {}

    # ---- the public turn interface (rollout/turn.py `Backend`) -----------------------------
    async def sample(self, prompt: list[int], max_tokens: int, temperature: float,
                     seed: int | None, top_p: float = 1.0, priority: int = 0,
                     stop: tuple[str, ...] = ()) -> Sampled:
        """One sampling request (`_sample`), its tokens counted in `progress`."""
        kwargs = {"stop": stop} if stop else {}
        out = await self._sample(prompt, max_tokens, temperature, seed, top_p, priority=priority,
                                 **kwargs)
        self._sampled_total += len(out.tokens)
        return out

    def phrase_ids(self, phrase: str) -> tuple[int, ...]:
        """The tokens of a forced-interruption phrase (cached)."""
        if phrase not in self._phrases:
            self._phrases[phrase] = tuple(self.tokenizer.encode(phrase, add_special_tokens=False))
        return self._phrases[phrase]

    def system_prompt(self, task: str) -> str | None:
        """Task `task`'s system prompt."""
        return self._scorer().system_prompt(task)

    async def judge(self, sample: Sample, completion: str) -> Score:
        """The task's verdict on `completion`, from the scorer's pool."""
        return await asyncio.wrap_future(self._scorer().submit(sample, completion))

    def render(self, messages: Sequence[dict], tools: Sequence[dict] = ()) -> list[int]:
        """Prompt tokens of `messages` rendered by the chat template (generation prompt added),
        `tools` shown through it when the run's tool format shows them."""
        extra = {}
        if tools:
            shown = self.env_context().tool_format.template_tools(tools)
            extra = {"tools": shown} if shown else {}
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=True, **extra)
        return self.tokenizer.encode(text, add_special_tokens=False)

    # ---- plumbing -------------------------------------------------------------------------
    def _call(self, coro, timeout_s: float | None, what: str):
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout_s)
        except TimeoutError as exc:
            fut.cancel()
            raise TimeoutError(f"{what} timed out after {timeout_s} s") from exc

    def prompt_ids(self, sample: Sample) -> list[int]:
        """The sample rendered with the tokenizer's chat template, its task's system prompt first
        (generation prompt added; a task with an environment: its tool schemas too)."""
        messages = sample.messages(self.system_prompt(sample.task))
        env = self._environment(sample)
        return self.render(messages, env.tool_schemas() if env is not None else ())

    def _environment(self, sample: Sample) -> Environment | None:
        """The sample's task's environment; None for a single-turn task (or none held)."""
        task = self.scorer.tasks.get(sample.task) if self.scorer is not None else None
        return getattr(task, "environment", None)

    def env_context(self) -> EnvContext:
        """The run's environment context: the one handed in, else built at first use from the
        `tool_format` setting and the scorer's grading (envs/context.py `run_context`)."""
        with self._env_lock:
            if self._env_context is None:
                from scalerl.envs.context import run_context

                self._env_context = run_context(self.tool_format, self.tokenizer,
                                                self._scorer().grading)
            if self._env_pool is None:
                self._env_pool = ThreadPoolExecutor(max(ENV_WORKERS, self.concurrency() or 0),
                                                    thread_name_prefix="environment")
            return self._env_context

    @property
    def head_dtype(self) -> str:
        """The dtype the engine computes its LM head in, as it reports it (`float32` with the
        FP32 head)."""
        if "head_dtype" not in self.engine_info:
            raise RuntimeError(f"{type(self).__name__} has not reported its head dtype yet")
        return self.engine_info["head_dtype"]

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded (0 = as started)."""
        return self._version

    # ---- one rollout: at most two sampling requests, or an episode -----------------------
    async def _rollout(self, sample: Sample, group: int, prompt: list[int], budget: Budget,
                       temperature: float, seed: int | None, score: bool,
                       top_p: float = 1.0, priority: int = 0) -> Rollout:
        sampling = T.Sampling(temperature, top_p, priority)
        env = self._environment(sample)
        if getattr(env, "played_elsewhere", False):  # its own harness plays it whole
            return await X.external_rollout(self, sample, group, prompt, budget, sampling, seed,
                                            score, env)
        if env is not None:
            context = self.env_context()
            return await E.run_episode(E.Episode(
                self, sample, group, prompt, budget, sampling, seed, env, context,
                self._env_pool), score)
        return await T.single_turn(self, sample, group, prompt, budget, sampling, seed, score)

    def too_long(self, sample: Sample, prompt: list[int], longest: int,
                 group: int) -> Rollout:
        """The rollout reported, unsent, for a prompt that cannot fit its longest completion."""
        detail = (f"prompt too long: {len(prompt)} prompt tokens + up to {longest} completion "
                  f"tokens > max_model_len {self.max_model_len}; not generated")
        return Rollout(
            sample_id=sample.id, task=sample.task, prompt_token_ids=tuple(prompt), token_ids=(),
            logprobs=(), versions=(), finish_reason="prompt_too_long", thinking_tokens=0,
            answer_tokens=0, completion="", group=group,
            score=Score(status="error", detail=detail),
            timings={"gen_s": 0.0, "score_s": 0.0, "gen_end": time.perf_counter()})

    # ---- public generation API ------------------------------------------------------------
    def stream(self, samples: Iterable[Sample], *, n: int = 1, budget: Budget | None = None,
               temperature: float = 1.0, seed: int | None = 0, score: bool = True,
               max_in_flight: int | None = None, top_p: float = 1.0,
               priority: int = 0, lane: Lane | None = None) -> Iterator[Rollout]:
        """Yield each Rollout as soon as it is generated and scored.

        `samples` is consumed lazily (an endless iterator works); at most `max_in_flight` rollouts
        are generating or waiting to be read (default: unbounded). `rollout.group` is its index
        among the `n` of its sample and `rollout.meta["index"]` the sample's position in
        `samples`. `score=False` skips the verdicts. A prompt too long for `max_model_len`
        yields n `prompt_too_long` rollouts (never sent). `top_p` < 1 samples from the nucleus
        (evaluation protocols such as DeepSeek-R1's top-p 0.95; the trainer keeps 1.0).
        `priority` orders these requests in the engine's queue against other calls' (lower =
        earlier; PipelineRL passes the prompt's admission number; see the module docstring).
        `lane` bounds this call's requests to `lane.share` of each engine's running batch
        (rollout/admission.py; held-out validation beside training), None: no bound.
        """
        budget = budget or Budget()
        if n <= 0 or temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need n > 0, temperature >= 0 and 0 < top_p <= 1, got n={n}, "
                             f"temperature={temperature}, top_p={top_p}")
        self._scorer()  # no scorer: one line now, not an error per rollout
        out: queue.Queue = queue.Queue()
        slots: list = [None]
        job = asyncio.run_coroutine_threadsafe(
            self._drive(iter(samples), n, budget, (temperature, top_p, priority), seed, score,
                        max_in_flight, out, slots, self._bound(lane)), self._loop)
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

    async def _drive(self, samples, n, budget, sampling, seed, score, max_in_flight,
                     out: queue.Queue, slots: list, bound: Bound | None = None) -> None:
        lane_scope(bound)  # this call's rollout tasks inherit it (rollout/admission.py)
        sem = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        slots[0] = sem
        tasks: set[asyncio.Task] = set()

        def finished(task: asyncio.Task) -> None:
            tasks.discard(task)
            if not task.cancelled():
                exc = task.exception()
                out.put(exc if exc is not None else task.result())

        phrase_len = len(self.phrase_ids(budget.phrase))
        single, first_turn = budget.hard_cap(phrase_len), E.first_turn_cap(budget, phrase_len)
        try:
            for index, sample in enumerate(samples):
                prompt = self.prompt_ids(sample)
                longest = single if self._environment(sample) is None else first_turn
                for group in range(n):
                    if sem is not None:
                        await sem.acquire()
                    if len(prompt) + longest > self.max_model_len:
                        rollout = self.too_long(sample, prompt, longest, group)
                        rollout.meta["index"] = index
                        out.put(rollout)
                        continue
                    task = asyncio.ensure_future(self._tagged(
                        index, sample, group, prompt, budget, sampling, seed, score))
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

    async def _tagged(self, index, sample, group, prompt, budget, sampling, seed, score):
        temperature, top_p, priority = sampling
        rollout = await self._rollout(sample, group, prompt, budget, temperature, seed, score,
                                      top_p, priority)
        rollout.meta["index"] = index
        return rollout

    def generate(self, samples: Sequence[Sample], *, n: int = 1, budget: Budget | None = None,
                 temperature: float = 1.0, seed: int | None = 0,
                 score: bool = True, top_p: float = 1.0, priority: int = 0,
                 lane: Lane | None = None) -> list[Rollout]:
        """All rollouts, ordered by sample then group (sample i's rollouts at i*n .. i*n+n-1);
        `priority` and `lane` as in `stream`."""
        rollouts = list(self.stream(samples, n=n, budget=budget, temperature=temperature,
                                    seed=seed, score=score, top_p=top_p, priority=priority,
                                    lane=lane))
        return sorted(rollouts, key=lambda r: (r.meta["index"], r.group))

    def _scorer(self) -> Scorer:
        if self.scorer is None:
            raise ValueError(f"{type(self).__name__} has no scorer: build it with "
                             "scorer=Scorer(tasks, grading) (the run's tasks render and score "
                             "its prompts)")
        return self.scorer

    def close(self) -> None:
        """Stop the tool sessions, the environments' threads, the scorer and the event loop
        (subclasses stop their backend first)."""
        sessions = getattr(self._env_context, "sessions", None)
        if self._owns_context and callable(getattr(sessions, "close", None)):
            sessions.close()
        if self._env_pool is not None:
            self._env_pool.shutdown(wait=True)
        if self.scorer is not None:
            self.scorer.close()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
