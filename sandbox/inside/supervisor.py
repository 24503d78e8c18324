"""The per-run supervisor, INSIDE the sandbox: starts the program under rlimits, reports, kills.

Runs inside the sandbox as `python3 -I -c <this source> MODE CONFIG` or as its compiled
`supervisor.pyc` (inside/warm_init.py imports it there); the grader never imports it, and only the
unconfined `process` backend runs it on the host, as a child process. It imports only builtin/tiny
modules (no json, re, enum: they would double the start-up cost): the host's config arrives as
marshal (host-made, trusted), the report leaves as JSON written by `dumps` below (the host parses it
with json, safely).
Covered: rlimits set in the child only, exact exit code / signal, a `python` program run in a
fork of this already-started interpreter (one interpreter start per run), collected files read
with O_NOFOLLOW and capped, every other process of the run SIGKILLed before the report. Not
covered: wall time and memory (the host enforces those with cgroups / docker).
Modes: `direct` (fds 0-2 belong to the program, report on fd `report_fd`, config as hex marshal
in argv) and `framed` (docker exec: config, files and stdin as one marshal on stdin; one report
on stdout).
"""

import _signal as signal
import binascii
import marshal
import os
import resource
import sys
import time

RLIMITS = {"cpu": resource.RLIMIT_CPU, "nofile": resource.RLIMIT_NOFILE,
           "fsize": resource.RLIMIT_FSIZE, "as": resource.RLIMIT_AS,
           "nproc": resource.RLIMIT_NPROC, "core": resource.RLIMIT_CORE}
PY_FLAGS_INLINE = ("-c", "-m")


def set_rlimits(rlimits):
    for name, value in rlimits.items():
        hard = value + 1 if name == "cpu" else value  # SIGXCPU first, SIGKILL one second later
        resource.setrlimit(RLIMITS[name], (value, hard))


def exit_code_of(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:  # noqa: SIM105 - contextlib would cost an import
        print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the program's own object; nothing more to do
        pass
    return 1


def run_python_inline(args):
    """Emulate `python3 -I ARGS` in this forked interpreter; returns the exit code."""
    try:
        if args[0] == "-m":
            import runpy

            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            if args[0] == "-c":
                sys.argv, source, filename = ["-c", *args[2:]], args[1], "<string>"
            else:
                sys.argv, filename = list(args), args[0]
                with open(filename, "rb") as f:
                    source = f.read()
            main = type(sys)("__main__")
            main.__builtins__ = __builtins__
            if filename != "<string>":
                main.__file__ = filename
            sys.modules["__main__"] = main
            exec(compile(source, filename, "exec"), main.__dict__)
        code = 0
    except SystemExit as exc:
        code = exit_code_of(exc)
    except BaseException as exc:  # noqa: BLE001 - same as the interpreter: traceback, exit 1
        import traceback

        tb = exc.__traceback__
        while tb and (tb.tb_frame.f_code is run_python_inline.__code__
                      or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
            tb = tb.tb_next  # show the program's frames only, as `python3 main.py` would
        traceback.print_exception(type(exc), exc, tb)
        code = 1
    return finish_python(code)


def finish_python(code):
    """What the interpreter does at exit: join threads, atexit, flush."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = exit_code_of(exc)
    except BaseException:  # noqa: BLE001
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - e.g. EPIPE, EFBIG: the interpreter reports 120
            code = code or 120
    return code


def child(cfg):
    """In the forked child: limits, then become the program. Never returns."""
    try:
        if cfg.get("reset") or cfg.get("make_dumpable"):  # we were made non-dumpable; it is not
            set_dumpable(1)
        os.chdir(cfg["cwd"])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        set_rlimits(cfg["rlimits"])
        argv = cfg["argv"]
        if argv[0] == "python" and len(argv) > 1 and (argv[1] in PY_FLAGS_INLINE
                                                      or not argv[1].startswith("-")):
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as a fresh interpreter has it
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os._exit(run_python_inline(argv[1:]))
        if argv[0] == "python":
            argv = [cfg["python"], "-I", *argv[1:]]
        os.execvp(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - report and die; nothing else can be done here
        os.write(2, f"sandbox supervisor: cannot start {cfg['argv'][:1]}: {exc!r}\n".encode())
        os._exit(127)


def spawn(cfg, stdin_fd, out_fd, err_fd):
    pid = os.fork()
    if pid == 0:
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 65536)
        child(cfg)
    return pid


def wait_for(pid, deadline=None):
    """Reap children (we may be PID 1) until `pid` exits; returns (wait status, cpu seconds)."""
    while True:
        if deadline is not None:
            got, status, usage = os.wait4(-1, os.WNOHANG)
            if got == 0:
                if time.monotonic() > deadline:
                    return None, 0.0
                time.sleep(0.002)
                continue
        else:
            got, status, usage = os.wait4(-1, 0)
        if got == pid:
            return status, usage.ru_utime + usage.ru_stime


def kill_everyone_else(cfg, pid):
    """SIGKILL the rest of the run: daemons, grandchildren.

    `all` (inside a PID namespace or a container, as the sandbox uid): kill(-1) reaches every
    process of the run except this one and init. `group` (process backend, on the host): only
    the supervisor's own session (called with pid 0 after the report; it dies too),
    because kill(-1) there would hit the whole machine.
    """
    try:
        if cfg["kill"] == "all":
            os.kill(-1, signal.SIGKILL)
        elif pid == 0:  # group mode, after the report: the session, this supervisor included
            os.killpg(0, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_collected(cwd, names, cap):
    files, truncated, missing = {}, [], []
    for name in names:
        try:
            fd = os.open(os.path.join(cwd, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            missing.append(name)
            continue
        try:
            if not os.path.stat.S_ISREG(os.fstat(fd).st_mode):
                missing.append(name)
                continue
            data = os.read(fd, cap + 1)
        finally:
            os.close(fd)
        if len(data) > cap:
            truncated.append(name)
        files[name] = b64(data[:cap])
    return {"files": files, "files_truncated": truncated, "files_missing": missing}


def status_fields(status, cpu):
    if status is None:
        return {"exit_code": None, "signal": None, "cpu_s": cpu}
    if os.WIFSIGNALED(status):
        return {"exit_code": None, "signal": os.WTERMSIG(status), "cpu_s": cpu}
    return {"exit_code": os.WEXITSTATUS(status), "signal": None, "cpu_s": cpu}


def direct(cfg):
    """bwrap/process: fds 0-2 go straight to the program; the report goes to cfg['report_fd']."""
    report_fd = cfg["report_fd"]
    os.set_inheritable(report_fd, False)
    pid = os.fork()
    if pid == 0:
        os.closerange(3, 65536)
        child(cfg)
    for fd in (0, 1, 2):
        os.close(fd)
    status, cpu = wait_for(pid)
    kill_everyone_else(cfg, pid)
    report = status_fields(status, cpu)
    report.update(read_collected(cfg["cwd"], cfg["collect"], cfg["collect_cap"]))
    data = dumps(report).encode()
    while data:
        data = data[os.write(report_fd, data):]
    os.close(report_fd)
    kill_everyone_else(cfg, 0)


def reset_dir(path):
    """Empty a dir the sandbox uid owns, even subdirs the program made unreadable (chmod 0)."""
    for name in os.listdir(path):
        full = f"{path}/{name}"
        if os.path.stat.S_ISDIR(os.lstat(full).st_mode):
            os.chmod(full, 0o700)
            reset_dir(full)
            os.rmdir(full)
        else:
            os.unlink(full)


def wipe(paths):
    """Empty every path; returns '' or why not (the host then discards the container)."""
    try:
        for path in paths:
            reset_dir(path)
    except (OSError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def oom_kills():
    """The container's OOM-kill counter (cgroup v2 memory.events or v1 memory.oom_control)."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def survivors(grace_s=0.5):
    """Processes still alive besides init and us after the kill (0 = the container is clean)."""
    me, deadline = os.getpid(), time.monotonic() + grace_s
    while True:
        alive = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, me):
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            alive += state != "Z"
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.01)


def framed(cfg_text):
    """docker exec: one JSON in on stdin (cfg, files, stdin), one JSON out on stdout.

    A program that closes its stdout and stderr before it exits (C programs do, at exit) is
    waited for until the wall limit before the rest of the run is killed, not killed with it."""
    msg = marshal.loads(sys.stdin.buffer.read() if cfg_text == "-" else bytes.fromhex(cfg_text))
    cfg = msg["cfg"]
    set_dumpable(0)  # same uid as the program: no ptrace of, or /proc/<pid>/fd access to, us
    for path in cfg.get("reset", ()):
        reset_dir(path)
    for name, data in msg["files"].items():
        path = os.path.join(cfg["cwd"], name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, msg["stdin"])
    os.lseek(stdin_fd, 0, 0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ooms = oom_kills()
    start = time.monotonic()
    pid = spawn(cfg, stdin_fd, out_w, err_w)
    for fd in (stdin_fd, out_w, err_w):
        os.close(fd)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    outcome, exited = pump(bufs, cfg["output_cap"], start + cfg["wall_s"], cfg, pid)
    if outcome is None and exited is None:  # it closed stdout and stderr but has not exited yet
        status, cpu = wait_for(pid, deadline=start + cfg["wall_s"])
        outcome, exited = ("timeout", None) if status is None else (None, (status, cpu))
    kill_everyone_else(cfg, pid)
    status, cpu = exited or wait_for(pid, deadline=time.monotonic() + 2.0)
    report = status_fields(status, cpu)
    report.update(read_collected(cfg["cwd"], cfg["collect"], cfg["collect_cap"]))
    report.update(outcome=outcome, wall_s=time.monotonic() - start, survivors=survivors(),
                  dirty=wipe(cfg.get("reset", ())),
                  oom_kills=oom_kills() - ooms,
                  stdout=b64(bufs[out_r]), stderr=b64(bufs[err_r]))
    sys.stdout.write(dumps(report))
    sys.stdout.flush()


def set_dumpable(flag):
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, flag, 0, 0, 0)  # PR_SET_DUMPABLE


def pump(bufs, cap, deadline, cfg, pid):
    """Read the program's pipes until EOF, the cap or the deadline.

    Returns (outcome, exited): outcome None / "timeout" / "output_limit"; exited is the
    (wait status, cpu) of the program once it exited. When it exits, the rest of the run is
    killed at once, so a grandchild holding stdout open cannot stall us.
    """
    from select import select as sel

    open_fds, exited = set(bufs), None
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", exited
        ready, _, _ = sel(list(open_fds), [], [], min(left, 0.02))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            bufs[fd] += chunk
            if len(bufs[fd]) > cap:
                del bufs[fd][cap:]
                return "output_limit", exited
        if exited is None:
            got, status, usage = os.wait4(pid, os.WNOHANG)
            if got == pid:
                exited = (status, usage.ru_utime + usage.ru_stime)
                kill_everyone_else(cfg, pid)
                deadline = min(deadline, time.monotonic() + 1.0)
    return None, exited


def b64(data):
    return binascii.b2a_base64(bytes(data), newline=False).decode()


def _quote(text):
    out = []
    for ch in text:
        n = ord(ch)
        if 32 <= n < 127 and ch not in '"\\':
            out.append(ch)
        elif n > 0xFFFF:  # JSON has only \\uXXXX: a surrogate pair
            n -= 0x10000
            out.append(f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}")
        else:
            out.append(f"\\u{n:04x}")
    return '"' + "".join(out) + '"'


def dumps(obj):
    """JSON for the report's plain types (None, bool, int, float, str, list, dict) without json."""
    if obj is None or isinstance(obj, bool):
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, (int, float)):
        return repr(obj)
    if isinstance(obj, str):
        return _quote(obj)
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in obj) + "]"
    return "{" + ",".join(_quote(str(k)) + ":" + dumps(v) for k, v in obj.items()) + "}"


def main():
    mode, cfg_text = sys.argv[1], sys.argv[2]
    if mode == "direct":
        direct(marshal.loads(bytes.fromhex(cfg_text)))
    elif mode == "framed":
        framed(cfg_text)
    else:
        raise SystemExit(f"sandbox supervisor: unknown mode {mode!r} (direct, framed)")


if __name__ == "__main__":
    main()
