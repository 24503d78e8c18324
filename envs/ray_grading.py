"""Grading on a Ray cluster: one long-lived grading actor per node (or per N cores), fed by load.

`grader(address, cores_per_actor, max_in_flight)` gives the process's `RayGrader` for those
settings (envs/grading.py `cluster_grader` reads them from `verifiers:`); it connects at its first
use: to the cluster at `address`, or to a Ray it starts on this machine (its temp dir, object
store and logs under a temp dir removed by `close_graders`, no dashboard). It places
envs/grading_host.py `GradingHost` actors on every live node (hard node affinity, `num_cpus`
reserved, restarted by Ray up to `MAX_RESTARTS` times) and sends each request to the actor with
the fewest outstanding ones (relative to its cap), at most `max_in_flight` per actor; the rest
wait here. The requests are what local grading runs (envs/ray_remote.py: a sandbox run, a batch
of math checks, a tool session's calls), so verdicts are the same. An actor that dies or does
not answer fails its in-flight requests with `GradingLost` (the caller's `error` verdict or
`SessionFailed`), is left out until a ping answers (restarted: back in service; dead or its node
gone: dropped), and the run goes on. This is the only module that imports Ray. Not here:
choosing local or Ray (envs/grading.py), the verdicts themselves (envs/code, envs/math).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from scalerl.envs.grading_host import GradingHost
from scalerl.envs.ray_dispatch import Dispatch, GradingLost, HostFailed, Slot

__all__ = ["GradingLost", "HostFailed", "RayGrader", "Slot", "close_graders", "grader",
           "raylets"]

log = logging.getLogger(__name__)

MAX_RESTARTS = 4
"""Times Ray restarts a crashed grading actor on its (live) node before it is dropped."""
CONTROL_CALLS = 8
"""Actor threads beyond `max_in_flight` for pings, session closes and reports."""
CALL_GRACE_S = 120.0
"""Added to a request's own worst case (its limits x the requests ahead of it) before the driver
gives up on the actor: a docker container's start, a loaded node."""
SHUTDOWN_S = 30.0
"""How long the actors may take to kill their sessions and sandboxes at the end (docker's
containers take seconds each) before they are killed anyway."""
READY_TIMEOUT_S = 120.0
"""How long the actors may take to start (an actor Ray cannot place is dropped after it)."""
PING_TIMEOUT_S = 5.0
CONNECT_S = 10.0
"""How long the cluster's address may take to accept a TCP connection at start-up."""
DROP_AFTER_S = 60.0
"""A suspect actor that has not answered a ping for this long is dropped."""
LOCAL_OBJECT_STORE_BYTES = 256 << 20
"""Object store of a Ray started here: requests are programs, tests and outputs (a large
LiveCodeBench input is tens of MB); Ray spills past it to its temp dir."""
RAY_MISSING = "Ray is not installed: pip install 'scalerl[ray]' (or make install)"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError(f"verifiers.cluster is 'ray' but {RAY_MISSING}") from None
    return ray


def _check_reachable(address: str) -> None:
    """RuntimeError (one line) when `HOST:PORT` (or `ray://HOST:PORT`) does not accept a TCP
    connection within CONNECT_S: Ray itself retries an unreachable cluster for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # `auto`, or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        raise RuntimeError(f"verifiers.ray_address {address!r}: nothing answers there "
                           f"({exc.strerror or exc}); start the cluster (ray start --head) or "
                           "fix the address") from None


class _Connection:
    """This process's Ray connection: who made it, and the temp dir of a Ray started here."""

    def __init__(self) -> None:
        self.owned = False
        self.temp_dir: str | None = None
        self.old_tmpdir: str | None = None
        self.pid = os.getpid()

    def open(self, address: str | None) -> None:
        ray = _ray()
        if ray.is_initialized():
            return  # attached already (by a caller, or another grader): not ours to shut down
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if address is None:
            self.temp_dir = tempfile.mkdtemp(prefix="scalerl-ray-")
            self.old_tmpdir = os.environ.get("RAY_TMPDIR")
            os.environ["RAY_TMPDIR"] = self.temp_dir  # Ray's address file goes there too
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, _temp_dir=self.temp_dir,
                     **quiet)
        else:
            _check_reachable(address)
            try:
                ray.init(address=address, **quiet)
            except Exception as exc:  # noqa: BLE001 - one line naming the address
                raise RuntimeError(f"verifiers.ray_address {address!r}: cannot connect to Ray: "
                                   f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                                   ) from None
        self.owned = True

    def close(self) -> None:
        if not self.owned or os.getpid() != self.pid:
            return
        _ray().shutdown()
        self.owned = False
        if self.temp_dir is not None:
            if self.old_tmpdir is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = self.old_tmpdir
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


_CONNECTION = _Connection()
_GRADERS: dict[tuple, RayGrader] = {}
_LOCK = threading.Lock()


def grader(address: str | None, cores_per_actor: int | None,
           max_in_flight: int | None) -> RayGrader:
    """The process's grader for these settings (made once; it connects at its first use)."""
    key = (address, cores_per_actor, max_in_flight)
    with _LOCK:
        addresses = {k[0] for k, g in _GRADERS.items() if g.started and not g.closed}
        if addresses and address not in addresses:
            raise ValueError(f"verifiers.ray_address {address!r}: this process already grades "
                             f"on Ray at {addresses.pop()!r}; one Ray cluster per process")
        if key not in _GRADERS or _GRADERS[key].closed:
            _GRADERS[key] = RayGrader(address, cores_per_actor, max_in_flight)
        return _GRADERS[key]


@contextlib.contextmanager
def raylets(nodes: int, cpus: int) -> Iterator[str]:
    """A Ray cluster of `nodes` raylets of `cpus` CPUs each on this machine (ray.cluster_utils;
    an 80 MB object store each, no dashboard; its temp dir removed at the end): its address.
    For benches: `scalerl bench grading` compares 1 and 2 nodes."""
    _ray()
    from ray.cluster_utils import Cluster

    temp, old = tempfile.mkdtemp(prefix="srl-ray-"), os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp
    node = {"num_cpus": cpus, "object_store_memory": 80 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        yield cluster.address
    finally:
        close_graders()
        cluster.shutdown()
        os.environ.pop("RAY_TMPDIR") if old is None else os.environ.update(RAY_TMPDIR=old)
        shutil.rmtree(temp, ignore_errors=True)


@atexit.register
def close_graders() -> None:
    """Stop every grader's actors (their sessions and sandboxes first), then the Ray this
    process started (its temp dir removed)."""
    with _LOCK:
        graders = list(_GRADERS.values())
        _GRADERS.clear()
    if os.getpid() != _CONNECTION.pid:
        return  # a forked child: its parent's actors are not its own
    for g in graders:
        g.close()
    _CONNECTION.close()


class RayGrader(Dispatch):
    """The driver side of grading on Ray (module docstring)."""

    def __init__(self, address: str | None, cores_per_actor: int | None,
                 max_in_flight: int | None) -> None:
        super().__init__()
        self.address, self.cores_per_actor = address, cores_per_actor
        self.max_in_flight = max_in_flight
        self._start_lock = threading.Lock()
        self._started = False
        self._failed = ""

    @property
    def started(self) -> bool:
        return self._started

    # --- start-up --------------------------------------------------------------------------
    def start(self) -> RayGrader:
        """Connect and place the actors (once); RuntimeError (one line) when none can start."""
        with self._start_lock:
            if self._started:
                return self
            if self.closed or self._failed:
                raise GradingLost(self._failed or "the Ray grader is closed")
            try:
                _CONNECTION.open(self.address)
                self.slots = self._place()
            except RuntimeError as exc:  # said once; every later request fails at once
                self._failed = str(exc)
                raise
            self._started = True
            threading.Thread(target=self._probe, name="ray-grading-probe", daemon=True).start()
        return self

    def _place(self) -> list[Slot]:
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = ray.remote(GradingHost)
        slots: list[Slot] = []
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
        for node in nodes:
            cpus = int(node["Resources"]["CPU"])
            per = min(self.cores_per_actor or cpus, cpus)
            for _ in range(max(1, cpus // per)):
                cap = self.max_in_flight or 2 * per
                handle = actor.options(
                    num_cpus=per, max_restarts=MAX_RESTARTS, max_task_retries=0,
                    max_concurrency=cap + CONTROL_CALLS,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                ).remote(per)
                slots.append(Slot(len(slots), handle, node["NodeID"],
                                  node.get("NodeManagerAddress", "?"), per, cap))
        if not slots:
            raise RuntimeError(f"Ray at {self.address or 'this machine'} has no live node with "
                               "a CPU to grade on")
        refs = {s.handle.info.remote(): s for s in slots}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=READY_TIMEOUT_S)
        for ref in ready:
            try:
                refs[ref].info = ray.get(ref)
                refs[ref].pid = refs[ref].info["pid"]
            except Exception as exc:  # noqa: BLE001 - that actor cannot start: dropped below
                log.warning("%s could not start: %s", refs[ref].name, exc)
        for s in slots:
            if not s.info:
                s.state = "dropped"
                ray.kill(s.handle, no_restart=True)
                log.warning("%s dropped: not started within %g s (its cores taken?)", s.name,
                            READY_TIMEOUT_S)
        if all(s.state == "dropped" for s in slots):
            where = self.address or "this machine"
            raise RuntimeError(f"no grading actor started on Ray at {where} within "
                               f"{READY_TIMEOUT_S:g} s")
        return slots

    # --- requests --------------------------------------------------------------------------
    def call(self, method: str, *args: Any, timeout_s: float, slot: Slot | None = None) -> Any:
        """`method(*args)` on the least loaded actor (or on `slot`); its value. GradingLost when
        the actor dies or does not answer within `timeout_s`; HostFailed when it answers that
        its node failed."""
        return self.call_on(method, *args, timeout_s=timeout_s, slot=slot)[1]

    def call_on(self, method: str, *args: Any, timeout_s: float, slot: Slot | None = None,
                session: bool = False) -> tuple[Slot, Any]:
        """`call`, also saying which actor answered; `session`: a session opens there (placed
        on the actor with the fewest, counted on it unless the call fails)."""
        ray = _ray()
        chosen = self.take(slot, session=session)
        status, value = "lost", "interrupted"
        try:
            status, value = ray.get(getattr(chosen.handle, method).remote(*args),
                                    timeout=timeout_s)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                ray.exceptions.RaySystemError) as exc:
            self._suspect(chosen)
            value = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        finally:
            self.give(chosen, closed_session=session and status != "ok")
        if status == "lost":
            raise GradingLost(f"{chosen.name}: {value}")
        if status != "ok":
            raise HostFailed(f"{chosen.name}: {value}")
        return chosen, value

    def control(self, slot: Slot, method: str, *args: Any) -> Any:
        """A quick call outside the in-flight cap (a session's close); None when it fails."""
        ray = _ray()
        try:
            return ray.get(getattr(slot.handle, method).remote(*args), timeout=CALL_GRACE_S)
        except Exception as exc:  # noqa: BLE001 - a dead actor's sessions died with it
            log.debug("%s: %s failed: %s", slot.name, method, exc)
            return None

    def _probe(self) -> None:
        """Ping suspect actors: back in service when one answers, dropped when it is dead,
        its node is gone, or it has not answered for DROP_AFTER_S."""
        ray = _ray()
        while not self.closed:
            time.sleep(0.5)
            for s in [s for s in self.slots if s.state == "suspect"]:
                state = self._ping(ray, s)
                with self._cond:
                    if s.state == "suspect" and state != "suspect":
                        s.state = state
                        log.warning("%s %s", s.name, "is back" if state == "ok" else "dropped")
                    self._cond.notify_all()

    def _ping(self, ray: Any, slot: Slot) -> str:
        try:
            slot.pid = ray.get(slot.handle.ping.remote(), timeout=PING_TIMEOUT_S)
            return "ok"
        except ray.exceptions.ActorDiedError:
            return "dropped"
        except Exception:  # noqa: BLE001 - unavailable (restarting, node going) or slow
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            gone = slot.node_id not in alive
            return "dropped" if gone or time.monotonic() - slot.since > DROP_AFTER_S \
                else "suspect"

    # --- reports and the end ---------------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        """Per node: its address, cores, actors, usable sandbox backends and problems."""
        self.start()
        out: dict[str, dict[str, Any]] = {}
        for s in self.slots:
            row = out.setdefault(s.node_id, {"node": s.node_ip, "node_id": s.node_id,
                                             "cores": 0, "actors": 0, "backends": [],
                                             "problems": {}})
            row["cores"] += s.cores
            row["actors"] += s.state != "dropped"
            if s.info:
                row["backends"] = s.info["backends"]
                row["problems"] = s.info["problems"]
        return list(out.values())

    def sandbox_problem(self, backend: str | None) -> str | None:
        """None when every node can run sandbox backend `backend` (None: its best one); else
        one line naming the nodes, why and the fix."""
        bad = [(row["node"], row["problems"].get(backend)) for row in self.nodes()
               if row["problems"].get(backend)]
        if not bad:
            return None
        where = ", ".join(node for node, _ in bad)
        return f"grading node {where} (Ray) cannot run code: {bad[0][1]}"

    def close(self) -> None:
        """Shut every actor's sessions and sandboxes, then kill the actors; idempotent."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            slots = [s for s in self.slots if s.state != "dropped"]
            self._cond.notify_all()
        if not slots or not _ray().is_initialized():
            return
        ray = _ray()
        refs = [s.handle.shutdown.remote() for s in slots if s.state == "ok"]
        ray.wait(refs, num_returns=len(refs), timeout=SHUTDOWN_S)
        for s in slots:
            ray.kill(s.handle, no_restart=True)
