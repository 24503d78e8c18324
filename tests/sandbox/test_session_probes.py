"""The hostile-program suite (sandbox/probes/) through the tool path: each probe's code as one call
of a fresh `PythonSession` on bwrap and docker, judged from the host as test_probes.py judges
single runs: the outcome, how long it took, the probe's own host-side check on the output
(secrets, the loopback listener, interpreter hashes, writes outside the tmpfs), and nothing left
once the session is closed (the run's token in host /proc, the session's processes).

A tool call's failures are observations, so the expected statuses are the tool's (ok | error |
timeout), not the single run's; a probe that ends its own interpreter (segfault, os._exit, the
memory limit) must say so and leave a session that still answers. The `process` backend is not a
security boundary and is not run here (its single-run claims are in test_probes.py).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from scalerl.envs.environment import ToolOutcome
from scalerl.sandbox.base import ExecResult
from scalerl.sandbox.config import SandboxConfig
from scalerl.sandbox.selfcheck import PROBES, PROBES_DIR, Context, host_setup, survivors
from scalerl.sandbox.session import KILL_GRACE_S, SessionLimits, SessionPool

LIMITS = SessionLimits(call_s=1.5, memory_mb=128, processes=16, max_output_chars=100_000)
FILE_MB, OPEN_FILES = LIMITS.sandbox_limits().file_size_mb, LIMITS.sandbox_limits().open_files
SLACK_S = 1.0
BACKENDS = [pytest.param("bwrap", marks=pytest.mark.bwrap),
            pytest.param("docker", marks=pytest.mark.docker)]
ToolCheck = Callable[[ToolOutcome, Context], "str | None"]


def _host_check(name: str) -> ToolCheck:
    """The single-run probe's own check, applied to the tool's output as the program's stdout."""
    probe = next(p for p in PROBES if p.name == name)

    def check(out: ToolOutcome, ctx: Context) -> str | None:
        return probe.check(ExecResult(status="ok", stdout=out.output.encode()), ctx)
    return check


def _says(text: str) -> ToolCheck:
    return lambda out, ctx: None if text in out.output else f"output lacks {text!r}"


def _is(text: str) -> ToolCheck:
    return lambda out, ctx: None if out.output == text else f"output {out.output[:80]!r}"


def _int_at_most(limit: int) -> ToolCheck:
    def check(out: ToolOutcome, ctx: Context) -> str | None:
        words = out.output.split()
        value = int(words[-1]) if words and words[-1].isdigit() else -1
        return None if 0 <= value <= limit else f"{out.output[-80:]!r} (limit {limit})"
    return check


def _cut(out: ToolOutcome, ctx: Context) -> str | None:
    size = len(out.output)
    return None if out.truncated and size <= LIMITS.max_output_chars + 40 else f"{size} chars"


def _died_or_memory_error(out: ToolOutcome, ctx: Context) -> str | None:
    ok = "interpreter died" in out.output or "MemoryError" in out.output
    return None if ok else f"neither died nor MemoryError: {out.output[-200:]!r}"


ANY = frozenset({"ok", "error", "timeout"})
TOOL_EXPECT: dict[str, tuple[frozenset[str], ToolCheck | None]] = {
    "cpu_spin": (frozenset({"timeout"}), _says("timed out after 1.5 s")),
    "sleep": (frozenset({"timeout"}), _says("timed out after 1.5 s")),
    "ignored_signals": (frozenset({"timeout"}), _says("could not be interrupted")),
    "memory_bomb": (frozenset({"error"}), _died_or_memory_error),
    "fork_bomb": (frozenset({"timeout", "error"}), None),
    "thread_bomb": (frozenset({"timeout", "error"}), None),
    "infinite_stdout": (frozenset({"error", "timeout"}), _cut),  # EFBIG at the file-size cap
    "stderr_flood": (frozenset({"error", "timeout"}), _cut),
    "disk_fill": (frozenset({"ok"}), _int_at_most(3 * (FILE_MB << 20) + 4096)),
    "fd_exhaustion": (frozenset({"ok"}), _int_at_most(OPEN_FILES)),
    "segfault": (frozenset({"error"}), _says("signal 11 (SIGSEGV)")),
    "env_secrets": (ANY, _host_check("env_secrets")),
    "loopback_network": (frozenset({"ok"}), _host_check("loopback_network")),
    "host_files": (frozenset({"ok"}), _host_check("host_files")),
    "interpreter_writes": (frozenset({"ok"}), _host_check("interpreter_writes")),
    "readonly_root": (frozenset({"ok"}), _host_check("readonly_root")),
    "kill_parent": (frozenset({"ok", "error"}), None),
    # the probe ends with os._exit(13 if any privileged call worked else 0)
    "raw_syscalls": (frozenset({"error"}), _says("exited with status 0")),
    "daemon": (frozenset({"ok"}), _is("daemon started\n")),
    "grandchild_stdout": (frozenset({"ok"}), _is("parent done\n")),
    # a cell's final bare expression is shown, as in a notebook: os.write's return value, 3
    "fd1_direct": (frozenset({"ok"}), _is("42\n3\n")),
    "big_output": (frozenset({"ok"}), lambda out, ctx: _cut(out, ctx) or (
        None if out.output.startswith("y" * LIMITS.max_output_chars) else "not the program's")),
    # no stdin in a session (fd 0 is /dev/null); it ends with os._exit(0), its interpreter with it
    "stdin_eof": (frozenset({"error"}), _says("exited with status 0")),
}
_POOLS: dict[str, SessionPool] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


def test_every_probe_has_a_tool_expectation():
    assert sorted(TOOL_EXPECT) == sorted(p.name for p in PROBES)


def _alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                left.append(pid)
        except OSError:
            pass
    return left


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid} {Path(f'/proc/{pid}/stat').read_text()[:60]!r} "
                       f"{Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
        except OSError:
            out.append(f"{pid} (gone)")
    return out


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
@pytest.mark.parametrize("name", BACKENDS)
def test_probe_is_contained_through_the_tool(name, probe, require_backend):
    require_backend(name)
    if name not in _POOLS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _POOLS[name] = SessionPool(SandboxConfig(backend=name), LIMITS, warm=2)
    statuses, check = TOOL_EXPECT[probe.name]
    source = (PROBES_DIR / f"{probe.name}.py").read_text()
    session = _POOLS[name].acquire()
    problems = []
    with host_setup(probe) as ctx:
        argv = ["probe.py", ctx.token, *probe.args(ctx)]
        start = time.monotonic()
        out = session.run(f"import sys\nsys.argv = {argv!r}\n{source}")
        took = time.monotonic() - start
        if out.status not in statuses:
            problems.append(f"status {out.status} not in {sorted(statuses)}: "
                            f"{out.output[-300:]!r}")
        if took > LIMITS.call_s + KILL_GRACE_S + SLACK_S:
            problems.append(f"the call took {took:.1f} s")
        if check and (why := check(out, ctx)):
            problems.append(why)
        after = session.run("6 * 7")
        if after.output != "42\n":
            problems.append(f"the session did not answer after the probe: {after}")
        pids = session.pids()
        session.close()
        if alive := survivors(ctx.token):
            problems.append(f"processes survived close(): {alive}")
        if left := _alive(pids):
            problems.append(f"session processes left after close(): {_describe(left)}")
    assert not problems, "; ".join(problems)
