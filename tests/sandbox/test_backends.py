"""Every backend runs correct programs correctly: files in, collect out, stdin, exit codes."""

from __future__ import annotations

import pytest

from scalerl.sandbox import Limits, available_backends, close_all, get_backend


def test_files_are_written_and_collected(backend):
    main = b"import json, sys\nopen('results.json', 'w').write(json.dumps(sys.stdin.read()))\n"
    r = backend.run(["python", "main.py"], stdin=b"abc", files={"main.py": main, "d/x.txt": b"1"},
                    collect=("results.json", "missing.json"))
    assert r.status == "ok", r
    assert r.extra == {"results.json": b'"abc"'}


def test_exit_code_and_stderr_are_reported(backend):
    r = backend.run(["python", "-c", "import sys; print('e', file=sys.stderr); sys.exit(3)"])
    assert (r.status, r.exit_code, r.stderr) == ("runtime_error", 3, b"e\n")


def test_uncaught_exception_is_runtime_error_with_traceback(backend):
    r = backend.run(["python", "-c", "1/0"])
    assert r.status == "runtime_error" and r.exit_code == 1
    assert r.stderr.endswith(b"ZeroDivisionError: division by zero\n")
    assert b"supervisor" not in r.stderr and b"runpy" not in r.stderr


def test_write_to_fd1_directly_and_1_3_mb_output_pass(backend):
    r = backend.run(["python", "-c", "import os; os.write(1, b'x' * 1_300_000)"])
    assert (r.status, len(r.stdout), r.truncated) == ("ok", 1_300_000, False)


def test_isolated_interpreter_ignores_script_dir(backend):
    """`python` means `python3 -I`: a planted json.py next to the script is not imported."""
    files = {"main.py": b"import json; print(json.dumps(1))", "json.py": b"raise SystemExit(9)"}
    r = backend.run(["python", "main.py"], files=files)
    assert (r.status, r.stdout) == ("ok", b"1\n")


def test_non_python_argv_runs(backend):
    r = backend.run(["sh", "-c", "echo $((6*7))"])
    assert (r.status, r.stdout) == ("ok", b"42\n")


def test_bad_file_name_is_refused(backend):
    with pytest.raises(ValueError, match="relative path"):
        backend.run(["python", "-c", "pass"], files={"../x": b""})


def test_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="known: .*bwrap"):
        get_backend("nope")


def test_process_is_never_the_default():
    if not any(ok for name, (ok, _) in available_backends().items() if name != "process"):
        with pytest.raises(RuntimeError, match="must be named explicitly"):
            get_backend()
    else:
        assert get_backend().name in ("bwrap", "docker")  # bwrap = warm workers


def test_timeout_is_reported_within_slack(backend):
    r = backend.run(["python", "-c", "import time; time.sleep(30)"], limits=Limits(wall_s=1))
    assert r.status == "timeout" and 1.0 <= r.wall_s < 2.0, r


def test_forked_child_gets_its_own_backend_instances(require_backend):
    """Warm workers are per process: a fork must not talk to its parent's workers.

    (bwrap only: the docker SDK in a fork of a threaded process can deadlock on its own locks.)
    """
    import os
    import select
    import signal

    parent = require_backend("bwrap")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a different instance that works
        try:
            child = get_backend("bwrap")
            ok = child is not parent and child.run(["python", "-c", "print(7)"]).stdout == b"7\n"
            os.write(w, b"1" if ok else b"0")
            close_all()
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 30)
    answer = os.read(r, 1) if ready else b"hung"
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert parent.run(["python", "-c", "print(8)"]).stdout == b"8\n"


def test_a_broken_sandbox_is_a_sandbox_error_not_a_program_failure(require_backend, monkeypatch):
    """A cgroup that cannot be made (mocked: it cannot be broken for real here) is reported."""
    from scalerl.sandbox import cgroup

    backend = require_backend("bwrap-cold")

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cgroup.RunCgroup, "create", classmethod(refuse))
    r = backend.run(["python", "-c", "print(1)"])
    assert r.status == "sandbox_error" and "cgroup" in r.detail, r


def test_missing_program_is_a_runtime_error(backend):
    r = backend.run(["/no/such/binary"])
    assert (r.status, r.exit_code) == ("runtime_error", 127), r
    assert b"cannot start" in r.stderr
