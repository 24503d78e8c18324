"""File descriptors for a client of many vLLM servers: how many it needs, and the soft limit raised.

Every generation request in flight holds one HTTP connection (one descriptor) in the client and
one in its server: rank 0 of a run on 5 engines of max_num_seqs 95 holds up to 5 x 2 x 95 of
them, more than a default soft limit of 1024 once the rest of the process is counted, and a
client out of descriptors fails its health probes (EMFILE) and drops server after server.
`fds_needed` counts what the client's connection pools may hold (`open_sessions` bounds them
to exactly that); `raise_fd_limit` raises the soft RLIMIT_NOFILE toward the hard one at
start-up (local servers inherit it) and refuses, with the `ulimit -n` that fixes it, when even
the hard limit is too low; `open_sessions` opens the client's two connection pools, bounded so.
Nothing else is changed here.
"""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger(__name__)

CONTROL_CONNECTIONS = 16
"""Most control connections (health, pause, reload, label, ...) open to one server at once: a
probe, the probe of a failed request, a join's or an update's call and their retries are each
one, each on a fresh connection (rollout/server_pool.py); 16 leaves room to spare."""
SPARE_CONNECTIONS = 2
"""Generation connections per server beyond its request cap: one being closed while the next
opens."""
FD_RESERVE = 512
"""Descriptors for everything else in the client's process: 6 after importing torch, vLLM and
aiohttp (measured here, /proc/self/fd), plus logs, checkpoints, the tokenizer, sandbox workers'
pipes and NCCL's sockets, a few each; 512 is a wide margin over them."""
KEEPALIVE_S = 2.0
"""Seconds an idle generation connection is kept (vLLM's server drops them after 5)."""
SOFT_TARGET = 65535
"""The soft limit aimed for when the hard one allows (vLLM's own API server raises its soft
limit to 65535: vllm/utils/system_utils.py, set_ulimit)."""


def fds_needed(servers: int, requests_per_server: int) -> int:
    """Descriptors a client of `servers` servers with `requests_per_server` generation requests
    in flight on each may hold at once: its connection pools' bounds plus FD_RESERVE."""
    per_server = requests_per_server + SPARE_CONNECTIONS + CONTROL_CONNECTIONS
    return servers * per_server + FD_RESERVE


def raise_fd_limit(need: int, what: str) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to max(need, SOFT_TARGET), at most the hard limit; RuntimeError
    with the fix when the hard limit is below `need` (`what`: what needs them). Returns the
    (soft, hard) limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else max(need, SOFT_TARGET)
    if ceiling < need:
        raise RuntimeError(f"{what} needs up to {need} open files, but RLIMIT_NOFILE's hard "
                           f"limit is {hard}: raise it (`ulimit -n {need}` in the launching "
                           f"shell, or the job's LimitNOFILE) or lower engine.server_max_requests")
    target = min(ceiling, max(need, SOFT_TARGET))
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        logger.info("raised the open-files soft limit from %d to %d (%s needs up to %d)",
                    soft, target, what, need)
        soft = target
    return soft, hard


def open_sessions(servers: int, requests_per_server: int) -> tuple:
    """The client's two aiohttp sessions (rollout/server_pool.py), bounded per server, after
    raising the open-files limit to hold them all. Generation reuses connections, dropped well
    before vLLM's 5 s keep-alive ends (a connection the server closes as it is reused would look
    like a failed server); control calls each get a fresh one (vLLM closes the connection after
    an error reply, e.g. a failed reload)."""
    import aiohttp

    raise_fd_limit(fds_needed(servers, requests_per_server),
                   f"a client of {servers} vLLM server(s) with up to {requests_per_server} "
                   "requests in flight on each (engine.server_max_requests)")
    per_server = requests_per_server + SPARE_CONNECTIONS
    generation = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        limit=servers * per_server, limit_per_host=per_server, keepalive_timeout=KEEPALIVE_S))
    control = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        force_close=True, limit=servers * CONTROL_CONNECTIONS, limit_per_host=CONTROL_CONNECTIONS))
    return generation, control
