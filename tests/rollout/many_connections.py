"""A client of vLLM servers with many requests in flight at once, run as its own process (so a
test can start it under `ulimit -n`): `python many_connections.py MODEL N URL...` samples N
one-prompt requests at once with every server's cap at N / len(URL) and prints, as JSON, the
open-files limits it ran under, the tokens of each request and the servers' state."""

from __future__ import annotations

import asyncio
import json
import resource
import sys

from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.server_generator import ServerGenerator


def main(model: str, n: int, urls: list[str]) -> None:
    config = EngineConfig(servers=tuple(urls), server_wait_s=10.0,
                          server_max_requests=n // len(urls))
    gen = ServerGenerator(model, config=config)
    try:
        async def go():
            return await asyncio.gather(*(gen._sample([100 + i], 2, 1.0, 0) for i in range(n)))
        results = gen._call(go(), 120, "sampling")
        print(json.dumps({"limits": resource.getrlimit(resource.RLIMIT_NOFILE),
                          "tokens": [r.tokens for r in results],
                          "lost": [s.lost for s in gen.pool.servers],
                          "reissued": gen.reissued}))
    finally:
        gen.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
