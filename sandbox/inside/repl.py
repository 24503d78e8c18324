"""The persistent Python interpreter of a tool session, INSIDE the sandbox (host side: session.py).

Runs as `python3 -I -c <this source> CONFIG_JSON` in a sandbox that lives as long as one rollout.
Frames: 4-byte big-endian length + UTF-8 JSON, read from the fd that was stdin at start and written
to the fd that was stdout at start; both are moved to high close-on-exec fds first, then fd 0
becomes /dev/null and fds 1 and 2 a fresh anonymous capture file (memfd) per call, so whatever the
code (or a subprocess) writes to fd 1 or 2 lands in the capture, never in a frame. Per call: the
code runs in one persistent `__main__` namespace; a final bare expression's repr is printed when
not None (as Jupyter does); a raise prints the traceback of the cell's own frames; SIGALRM after
`call_s` raises `CallTimeout` (a BaseException) in the code. The reply carries the status (ok |
error | timeout), the first `capture_bytes` of the capture and its full size.
When started as PID 1 (bwrap --as-pid-1) it forks: PID 1 only reaps orphans and exits with the
interpreter's status, so daemons cannot fill the pids limit with zombies and the code cannot kill
its own init. Not covered: code that ignores or blocks SIGALRM (the host kills the session after a
grace), the limits themselves (cgroups / docker / rlimits set from the config), isolation.
"""

import ast
import fcntl
import io
import json
import linecache
import os
import resource
import signal
import sys
import traceback
import types

FRAME_FD_MIN = 60
NULL_FD, CAPTURE_FD = 58, 59
"""/dev/null, and the current call's capture: fixed fds, so the REPL needs no free fd after a call
(code may keep every fd it can open)."""
RLIMITS = {"nofile": resource.RLIMIT_NOFILE, "fsize": resource.RLIMIT_FSIZE,
           "as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "core": resource.RLIMIT_CORE}


class CallTimeout(BaseException):
    """Raised in the code by SIGALRM when the call's time is up (not an Exception: a bare
    `except Exception` in the code does not swallow it)."""


def read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, int.from_bytes(head, "big"))
    return None if body is None else json.loads(body)


def send(fd, obj):
    data = json.dumps(obj).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def reaper_if_pid1():
    """As PID 1: fork the interpreter, reap every orphan, exit with the interpreter's status."""
    if os.getpid() != 1:
        return
    child = os.fork()
    if child == 0:
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            os._exit(os.waitstatus_to_exitcode(status) % 256 if os.WIFEXITED(status)
                     else 128 + os.WTERMSIG(status))


def setup(cfg):
    """Frame fds moved out of the way, fd 0 on /dev/null, rlimits; returns (frame_in, frame_out)."""
    frame_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, FRAME_FD_MIN)
    frame_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, FRAME_FD_MIN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2, NULL_FD, CAPTURE_FD):
        os.dup2(null, fd)
    os.close(null)
    for fd in (NULL_FD, CAPTURE_FD):
        os.set_inheritable(fd, False)
    for name, value in cfg.get("rlimits", {}).items():
        resource.setrlimit(RLIMITS[name], (value, value))
    os.chdir(cfg["cwd"])
    sys.path.insert(0, "")  # the work dir, as an interactive interpreter has it
    return frame_in, frame_out


def fresh_capture(tmp):
    """Point fds 1 and 2 (and CAPTURE_FD) at a fresh anonymous file for one call: a memfd (outside
    the tmpfs mounts, so code that fills /tmp still shows its output; capped by RLIMIT_FSIZE and
    the memory limit), else an unlinked file in `tmp`. CAPTURE_FD is closed first, so this works
    even when the code holds every other fd it may open. A daemon keeps its own call's copy."""
    os.close(CAPTURE_FD)
    try:
        fd = os.memfd_create("tool-output", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        fd = os.open(tmp, os.O_TMPFILE | os.O_RDWR, 0o600)
    if fd != CAPTURE_FD:
        os.dup2(fd, CAPTURE_FD)
        os.close(fd)
    os.dup2(CAPTURE_FD, 1)
    os.dup2(CAPTURE_FD, 2)


def text_stream(fd):
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", write_through=True)


def on_alarm(signum, frame):
    raise CallTimeout()


def compile_cell(code, name):
    """(body, last expression or None), compiled under the cell's name; SyntaxError as raised."""
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return compile(tree, name, "exec"), (compile(last, name, "eval") if last else None)


def print_error(exc, name):
    """The traceback from the cell's first frame on (the REPL's own frames are not shown)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != name:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    sys.stderr.write("".join(lines))


def run_cell(code, n, ns, call_s):
    """Run one call's code in `ns`; returns ok | error | timeout (output went to fds 1/2)."""
    name = f"<cell {n}>"
    try:
        body, last = compile_cell(code, name)
    except (SyntaxError, ValueError) as exc:
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        return "error"
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, call_s)
            exec(body, ns)
            if last is not None:
                value = eval(last, ns)
                if value is not None:
                    ns["_"] = value
                    sys.stdout.write(repr(value) + "\n")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CallTimeout:
        return "timeout"
    except BaseException as exc:  # noqa: BLE001 - the code's own error is the observation
        try:  # noqa: SIM105 - the alarm may fire, or the capture be full (EFBIG), meanwhile
            print_error(exc, name)
        except BaseException:  # noqa: BLE001 - what was captured so far is the output
            pass
        return "error"
    return "ok"


def call(req, n, ns, cfg):
    """One call: capture on, run, capture off; the reply frame."""
    fresh_capture(cfg["tmp"])
    sys.stdout, sys.stderr = text_stream(1), text_stream(2)
    try:
        status = run_cell(req["code"], n, ns, cfg["call_s"])
    except CallTimeout:  # the alarm fired between the code's end and its cancellation
        status = "timeout"
    except BaseException:  # noqa: BLE001 - never let the code's mess end the interpreter
        status = "error"
    size = os.fstat(CAPTURE_FD).st_size
    data = os.pread(CAPTURE_FD, cfg["capture_bytes"], 0)
    for fd in (1, 2, CAPTURE_FD):
        os.dup2(NULL_FD, fd)
    return {"status": status, "output": data.decode("utf-8", "replace"), "bytes": size}


def serve(cfg, frame_in, frame_out):
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    ns = main.__dict__
    send(frame_out, {"ready": True, "pid": os.getpid()})
    n = 0
    while True:
        req = recv(frame_in)
        if req is None:
            os._exit(0)
        n += 1
        try:
            reply = call(req, n, ns, cfg)
        except Exception as exc:  # noqa: BLE001 - said in the reply, not a silent death
            reply = {"status": "error", "bytes": 0,
                     "output": f"the tool's interpreter could not run the call: {exc!r}"}
        send(frame_out, reply)


if __name__ == "__main__":
    CONFIG = json.loads(sys.argv[1])
    reaper_if_pid1()
    FRAMES = setup(CONFIG)
    serve(CONFIG, *FRAMES)
