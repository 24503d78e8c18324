"""A stand-in for a vLLM server's HTTP routes, for behaviour a real server cannot be made to show
on demand: a server still starting, a `/get_world_size` that answers late or never, an
`/update_weights` that takes minutes (an 8B broadcast), a generation request held as long as a
test likes while `/health` answers, a server that stops answering anything (`hang`), a route
that fails its next calls with HTTP 503 (`failing`). Serves on
loopback from a thread and records every call. Its `/inference/v1/generate` returns token 7
`max_tokens` times, labelled with its weight version (real tokens: tests/conftest.py's servers).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Awaitable, Callable

from aiohttp import web


class FakeServer:
    def __init__(self, model_root: str, *, world_size: int = 1, world_size_delay_s: float = 0.0,
                 update_delay_s: float = 0.0, max_model_len: int = 1024,
                 down_for_s: float = 0.0, data_parallel: int = 1,
                 hold: Callable[[list[int], int], Awaitable[None]] | None = None,
                 failing: dict[str, int] | None = None):
        self.model_root, self.world_size = model_root, world_size
        self.data_parallel = data_parallel
        """vLLM's `--data-parallel-size`: `/get_world_size` counts it unless `include_dp` is
        false (vLLM 0.32's route: TP x PP x DP by default, TP x PP without)."""
        self.world_size_delay_s, self.update_delay_s = world_size_delay_s, update_delay_s
        self.max_model_len = max_model_len
        self.down_for_s = down_for_s
        self.up_at: float | None = None
        """`down_for_s` after its first call; until then every call gets HTTP 503 (a server
        still starting)."""
        self.hold = hold
        """Awaited by a generation request (its prompt, its attempt: 0 the first time this
        prompt came) before it answers; None: it answers at once."""
        self.attempts: collections.Counter = collections.Counter()
        """Generation requests received, by prompt (a tuple)."""
        self.answered: list[tuple[int, ...]] = []
        self.dropped: list[tuple[int, ...]] = []
        """Prompts of generation requests whose client went away before the answer."""
        self.priorities: list[int] = []
        self.salts: list[str] = []
        """Each generation request's `priority` and `cache_salt`, in the order they came."""
        self.in_flight = self.most_in_flight = 0
        self.hung = False
        self.failing = collections.Counter(failing or {})
        """Route -> how many of its next calls get HTTP 503 (as vLLM answers while its engine
        is busy or broken) before it answers again."""
        self.label = "default"
        self.loaded = model_root
        """The weights it serves: where its last reload (`/collective_rpc`) read them from."""
        self.served: list[tuple[str, str]] = []
        """(version label, weights loaded) each generation request was answered with."""
        self.calls: list[str] = []
        self.rpcs: list[str] = []
        """The methods `/collective_rpc` was asked to run."""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)  # a client gone: cancelled
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        self.calls.append(path)
        if self.up_at is None:
            self.up_at = time.monotonic() + self.down_for_s
        if time.monotonic() < self.up_at or self.failing[path] > 0:
            self.failing[path] -= time.monotonic() >= self.up_at
            return web.json_response({"error": "starting or failing"}, status=503)
        if self.hung:  # SIGSTOPped: the connection opens, nothing ever answers
            await self._closing.wait()
        body = await request.json() if request.can_read_body else {}
        if path == "/inference/v1/generate":
            return await self._generate(body)
        if path == "/v1/models":
            return web.json_response({"data": [{"max_model_len": self.max_model_len,
                                                "root": self.model_root}]})
        if path == "/get_world_size":
            if self.world_size_delay_s < 0:  # never answers (until closed)
                await self._closing.wait()
            await asyncio.sleep(self.world_size_delay_s)
            include_dp = request.query.get("include_dp", "true").lower() not in ("false", "0")
            return web.json_response({"world_size": self.world_size * (
                self.data_parallel if include_dp else 1)})
        if path == "/weight_info":
            return web.json_response({"weight_version": self.label})
        if path == "/update_weight_version":
            self.label = body["new_version"]
        if path == "/update_weights":
            await asyncio.sleep(self.update_delay_s)
        if path == "/collective_rpc":
            self.rpcs.append(body["method"])
            self.loaded = (body.get("kwargs") or {}).get("weights_path", self.loaded)
            info = {"head_dtype": "float32", "dtype": "float32",  # as `scalerl serve` starts
                    "max_model_len": self.max_model_len}
            result = info if body["method"] == "scalerl_engine_info" else None
            return web.json_response({"results": [result] * self.world_size})
        return web.json_response({})

    async def _generate(self, body: dict) -> web.Response:
        prompt = tuple(body["token_ids"])
        attempt = self.attempts[prompt]
        self.attempts[prompt] += 1
        self.priorities.append(body.get("priority", 0))
        self.salts.append(body.get("cache_salt", ""))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hold is not None:
                await self.hold(list(prompt), attempt)
            if self.hung:
                await self._closing.wait()
        except asyncio.CancelledError:
            self.dropped.append(prompt)
            raise
        finally:
            self.in_flight -= 1
        self.answered.append(prompt)
        self.served.append((self.label, self.loaded))
        n = body["sampling_params"]["max_tokens"]
        return web.json_response({"choices": [{
            "finish_reason": "length", "token_ids": [7] * n,
            "logprobs": {"content": [{"logprob": -1.0}] * n},
            "weight_versions": [{"start": 0, "end": n, "version": self.label}]}],
            "usage": {"prompt_tokens_details": {"cached_tokens": 0}}})

    def hang(self) -> None:
        """From now on nothing answers (running generation requests included), as when every
        process of a server is stopped."""
        self.hung = True

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._closing.set)
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
