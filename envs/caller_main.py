"""Processes started without the caller's `__main__`: `no_caller_main()`.

Under the spawn and forkserver start methods, multiprocessing has every new process import the
parent's `__main__` again (its path or module name travels in the "preparation data"). For a
caller's script that means: without an `if __name__ == "__main__":` guard the script runs again
in each child; fed on stdin (`python -`, main path `<stdin>`) no child can start at all. While
`no_caller_main()` is active, processes started by spawn or forkserver get the preparation data
without the main, so they start from the module of their target (the deadline pool's workers,
vLLM's engine processes). It changes nothing else in the data, and nothing outside its scope;
a target or argument defined in the caller's script cannot then be unpickled in the child.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from multiprocessing import spawn
from typing import Any

_LOCK = threading.Lock()
_SCOPES = 0
"""`no_caller_main()` scopes active in this process (any thread)."""
_THREAD = threading.local()
"""`on`: a `no_caller_main(this_thread=True)` scope is active in this thread."""


@contextlib.contextmanager
def no_caller_main(*, this_thread: bool = False) -> Iterator[None]:
    """Processes started meanwhile (by any thread; with `this_thread`, by this one only) do not
    import the caller's `__main__`."""
    global _SCOPES
    if this_thread:
        before = getattr(_THREAD, "on", False)
        _THREAD.on = True
        try:
            yield
        finally:
            _THREAD.on = before
        return
    with _LOCK:
        _SCOPES += 1
    try:
        yield
    finally:
        with _LOCK:
            _SCOPES -= 1


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a new process, less `init_main_from_path` /
    `init_main_from_name` inside a `no_caller_main()` scope."""
    data = _STDLIB_PREPARATION_DATA(name)
    if _SCOPES or getattr(_THREAD, "on", False):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


_STDLIB_PREPARATION_DATA = getattr(spawn.get_preparation_data, "__wrapped__",
                                   spawn.get_preparation_data)
_preparation_data.__wrapped__ = _STDLIB_PREPARATION_DATA  # type: ignore[attr-defined]
spawn.get_preparation_data = _preparation_data  # spawn's and forkserver's Popen look it up here
