"""`no_caller_main()`: processes started in its scope do not import the caller's `__main__`."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from multiprocessing import spawn

import pytest

from scalerl.envs.caller_main import no_caller_main

MAIN_KEYS = {"init_main_from_path", "init_main_from_name"}


def main_keys(box: list | None = None) -> set[str]:
    keys = MAIN_KEYS & set(spawn.get_preparation_data("probe"))
    if box is not None:
        box.append(keys)
    return keys


@pytest.fixture(autouse=True)
def script_main(monkeypatch):
    """A `__main__` run from a path, as `python script.py` has: the runner's own may have neither
    a path nor a module name (pytest-xdist's workers run from execnet's `-c` bootstrap)."""
    main = types.ModuleType("__main__")
    main.__file__ = __file__
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_outside_the_scope_the_data_names_the_main():
    assert main_keys() == {"init_main_from_path"}


def test_inside_the_scope_no_thread_sends_the_main():
    with no_caller_main():
        box: list = []
        thread = threading.Thread(target=main_keys, args=(box,))
        thread.start()
        thread.join()
        assert main_keys() == set() and box == [set()]
    assert main_keys()


def test_a_this_thread_scope_leaves_other_threads_alone():
    with no_caller_main(this_thread=True):
        box: list = []
        thread = threading.Thread(target=main_keys, args=(box,))
        thread.start()
        thread.join()
        assert main_keys() == set() and box[0]


SCRIPT = """
import multiprocessing as mp
print("script ran", flush=True)
from scalerl.envs.caller_main import no_caller_main
with no_caller_main():
    p = mp.get_context(METHOD).Process(target=print, args=("child ran",))
    p.start()
    p.join()
print("exit", p.exitcode, flush=True)
"""
"""No main guard, fed on stdin: outside the scope the child would die opening `<stdin>`."""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_child_of_a_script_fed_on_stdin_starts(tmp_path, method):
    proc = subprocess.run([sys.executable, "-"], input=f"METHOD = {method!r}\n" + SCRIPT,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.stdout.splitlines() == ["script ran", "child ran", "exit 0"], proc.stderr
