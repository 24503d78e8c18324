"""The program that runs INSIDE the sandbox to grade code; stdlib only, started as `python -I`.

Stdin holds a marshal-encoded spec (from the trusted parent) with `mode` and a per-run `nonce`,
then the `n` tests' inputs, one marshal frame each, read one test at a time so this process never
holds them all:
- `call`: import `prog.py` once (then the problem's `setup`, e.g. MBPP's `test_setup_code`, in
  the candidate's namespace), call `fn_name` on each test's arguments (one frame per call) with a
  per-call deadline and print each result as strict tagged JSON (`encode`). The PARENT compares;
  expected values are never sent here.
- `stdio`: run `python -I prog.py` once per test (own session, deadline), stdin from a file
  holding that test's input, stdout to a capped file; report the output, the parent compares.
- `check`: asserts that could not be turned into call tests (HumanEval, EvalPlus). This process
  (trusted, non-dumpable) runs `check` and relays every `candidate(...)` call to a second process
  (`serve` mode) holding the candidate, so the candidate never shares a process with the
  expected values; each call has its own deadline, as EvalPlus gives each input one.
Values cross as tagged strict JSON (codec.py, shipped beside this file: Counter, namedtuple, big
ints, inf/nan... decode into the same types on the trusted side). A spec's `int_digits` sets the
candidate's int <-> str digit limit. Result lines are
`<nonce> <json>` on a private copy of fd 1 (the candidate's fd 1 goes to stderr). Only builtin
modules load on the `call` path (no json/re/subprocess): start-up is most of a grading run's cost.
"""

import _signal
import marshal
import os
import sys
import time

# Captured before any candidate code can patch builtins or modules.
_type, _len, _repr, _str = type, len, repr, str
_write, _exit, _monotonic = os.write, os._exit, time.monotonic
_setitimer, _BaseException, _ValueError = _signal.setitimer, BaseException, ValueError
_load = marshal.load


def _load_codec():
    """codec.py (beside this file) run from its path before any candidate code: `-I` keeps the
    working directory, which the candidate can write to, off sys.path."""
    ns = {"__name__": "codec", "__builtins__": __builtins__}
    with open("codec.py", encoding="utf-8") as fh:
        exec(compile(fh.read(), "codec.py", "exec"), ns)
    return ns["encode"], ns["decode"]


encode, decode = _load_codec()


class Deadline(BaseException):
    """Raised by SIGALRM when a call passes its deadline."""


def record(fields, value_json=None):
    """JSON text of a flat record of str/int/float/bool/None fields, plus an encoded value."""
    parts = [encode(k) + ":" + encode(v) for k, v in fields.items()]
    if value_json is not None:
        parts.append('"value":' + value_json)
    return "{" + ",".join(parts) + "}"


class Channel:
    """The harness's private copy of fd 1; the candidate's fd 1 now writes to stderr."""

    def __init__(self, nonce):
        self.fd = os.dup(1)
        os.dup2(2, 1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self.nonce = nonce

    def emit(self, text):
        data = (self.nonce + " " + text + "\n").encode("utf-8", "replace")
        while data:
            data = data[_write(self.fd, data):]


def _on_alarm(signum, frame):
    raise Deadline()


def _failure(kind, e):
    return {"ok": False, "kind": kind, "error": _type(e).__name__ + ": " + _str(e)[:200]}


def load_candidate(prelude, timeout_s, setup=""):
    """(namespace, None), or (None, failure fields) when the module-level code fails. `setup`
    runs after the candidate's code, in its namespace (MBPP builds test objects with the
    candidate's own classes)."""
    ns = {"__name__": "candidate", "__builtins__": __builtins__}
    _setitimer(_signal.ITIMER_REAL, timeout_s)
    try:
        with open("prog.py", encoding="utf-8", errors="replace") as fh:
            source = fh.read()
        exec(compile(prelude + "\n" + source, "prog.py", "exec"), ns)
        if setup:
            exec(compile(setup, "setup.py", "exec"), ns)
        return ns, None
    except Deadline:
        return None, {"ok": False, "kind": "timeout", "error": "time limit exceeded at import"}
    except _BaseException as e:  # the candidate's exception, incl. SystemExit
        return None, _failure("import", e)
    finally:
        _setitimer(_signal.ITIMER_REAL, 0)


def resolve(ns, fn_name):
    """`Solution().fn_name` when the program's Solution class has it (LeetCode / LiveCodeBench
    style, as their harness prefers), else the module-level `fn_name`."""
    sol = ns.get("Solution")
    if _type(sol) is type and hasattr(sol, fn_name):
        return getattr(sol(), fn_name)
    if fn_name in ns:
        return ns[fn_name]
    raise NameError("name " + _repr(fn_name) + " is not defined")


def timed_call(fn, args, kwargs, timeout_s):
    """One call under a deadline -> (record fields, value JSON or None)."""
    start = _monotonic()
    _setitimer(_signal.ITIMER_REAL, timeout_s)
    try:
        value = fn(*args, **kwargs)
    except Deadline:
        return {"ok": False, "kind": "timeout", "error": "time limit exceeded"}, None
    except _BaseException as e:  # the candidate's exception, incl. SystemExit
        return _failure("exception", e), None
    finally:
        _setitimer(_signal.ITIMER_REAL, 0)
    if _monotonic() - start > timeout_s:
        return {"ok": False, "kind": "timeout", "error": "time limit exceeded (alarm caught)"}, None
    try:
        return {"ok": True}, encode(value)
    except _BaseException as e:  # NotPlain, a big int's ValueError, the candidate's __bool__
        return {"ok": False, "kind": "not_plain", "error": _str(e)[:200]}, None


def _candidate_fn(spec):
    """((function, its namespace), None) or (None, failure fields)."""
    ns, err = load_candidate(spec.get("prelude", ""), spec["timeout_s"], spec.get("setup", ""))
    if ns is None:
        return None, err
    try:
        return (resolve(ns, spec["fn_name"]), ns), None
    except _BaseException as e:
        return None, _failure("import", e)


def _call(found, call, timeout_s):
    """One call of the candidate: its arguments, with the names `refs` points at (objects the
    setup built) taken from the candidate's namespace."""
    fn, ns = found
    args = list(call["args"])
    for i, name in call.get("refs", ()):
        if name not in ns:
            return _failure("exception", NameError("name " + _repr(name) + " is not defined")), None
        args[i] = ns[name]
    return timed_call(fn, args, call.get("kwargs", {}), timeout_s)


def run_call(spec, chan, tests):
    _signal.signal(_signal.SIGALRM, _on_alarm)
    if spec.get("int_digits"):
        sys.set_int_max_str_digits(spec["int_digits"])
    found, err = _candidate_fn(spec)
    for i in range(spec["n"]):
        call = _load(tests)
        fields, value = (err, None) if found is None else _call(found, call, spec["timeout_s"])
        del call  # only the candidate may keep this test's arguments
        chan.emit(record(dict(fields, i=i), value))


def run_serve(spec, chan, requests):
    """Answer one call per marshal frame until EOF (the `check` process drives this)."""
    _signal.signal(_signal.SIGALRM, _on_alarm)
    found, err = _candidate_fn(spec)
    while True:
        try:
            req = marshal.load(requests)
        except EOFError:
            return
        if found is None:
            chan.emit(record(err))
        else:
            chan.emit(record(*_call(found, req, spec["timeout_s"])))


def _wait(pid, timeout_s):
    """Exit status of pid, or None when it is still running after timeout_s."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        import select

        ready = select.select([pidfd], [], [], timeout_s)[0]
        os.close(pidfd)
        return os.waitpid(pid, 0)[1] if ready else None
    deadline = _monotonic() + timeout_s
    while _monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.002)
    return None


def run_stdio_test(i, argv, timeout_s, out_cap):
    """Run the program on `.in` (this test's input) -> the test's record."""
    fds = [os.open(".in", os.O_RDONLY)]
    fds += [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for p in (".out", ".err")]
    start = _monotonic()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(fds)],
                         setsid=True)
    for fd in fds:
        os.close(fd)
    status = _wait(pid, timeout_s)
    elapsed = _monotonic() - start
    try:  # noqa: SIM105 - contextlib would cost an import on every run
        os.killpg(pid, _signal.SIGKILL)  # the program and anything it left in its session
    except ProcessLookupError:
        pass
    if status is None:
        os.waitpid(pid, 0)
        code, verdict = None, "timeout"
    else:
        code = os.waitstatus_to_exitcode(status)
        verdict = "ok" if code == 0 else "runtime_error"
    with open(".out", "rb") as fh:
        out = fh.read(out_cap + 1)
    with open(".err", "rb") as fh:
        err = fh.read(2000)
    if _len(out) > out_cap:
        verdict, out = "output_limit", out[:out_cap]
    return record({"i": i, "status": verdict, "exit": code, "wall_s": round(elapsed, 4),
                   "stdout": out.decode("utf-8", "replace"),
                   "stderr": err.decode("utf-8", "replace")})


def run_stdio(spec, chan, tests):
    _make_undumpable()
    digits = spec.get("int_digits")
    argv = [sys.executable, "-I", *(["-X", f"int_max_str_digits={digits}"] if digits else []),
            "prog.py"]
    for i in range(spec["n"]):
        with open(".in", "wb") as fh:
            fh.write(_load(tests))  # this test's input only; dropped before the program runs
        chan.emit(run_stdio_test(i, argv, spec["timeout_s"], spec["out_cap"]))


class Remote:
    """In the check process, a name the problem's setup binds in the candidate's process."""

    def __init__(self, name):
        self.name = name


class Candidate:
    """`candidate(...)` inside `check`: relays the call to the serve process, decodes its answer;
    a call past its deadline raises Deadline, as EvalPlus times each input."""

    def __init__(self, spec, subprocess):
        self.nonce = os.urandom(16).hex()
        serve = dict(spec, mode="serve", nonce=self.nonce)
        serve.pop("test")  # the serve process gets no assertion source
        self.proc = subprocess.Popen([sys.executable, "-I", "harness.py"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, close_fds=True)
        self.proc.stdin.write(marshal.dumps(serve))
        self.proc.stdin.flush()
        self.timeout_s, self.calls = spec["timeout_s"], 0

    def __call__(self, *args, **kwargs):
        import json

        self.calls += 1
        args = list(args)
        refs = [[i, a.name] for i, a in enumerate(args) if _type(a) is Remote]
        for i, _ in refs:
            args[i] = None
        self.proc.stdin.write(marshal.dumps({"args": args, "kwargs": kwargs, "refs": refs}))
        self.proc.stdin.flush()
        _setitimer(_signal.ITIMER_REAL, self.timeout_s + 1.0)
        try:
            line = self.proc.stdout.readline(64 << 20)
        finally:
            _setitimer(_signal.ITIMER_REAL, 0)
        prefix = (self.nonce + " ").encode()
        if not line.startswith(prefix):
            raise RuntimeError("candidate process gave no answer (exited or garbled)")
        answer = json.loads(line[_len(prefix):], parse_constant=_reject_constant)
        if answer.get("ok") is not True:
            if answer.get("kind") == "timeout":
                raise Deadline()
            raise RuntimeError("candidate call failed: " + _str(answer.get("error")))
        return decode(answer["value"])


def _reject_constant(name):
    raise _ValueError(name + " is not strict JSON")


def run_check(spec, chan, tests):
    """Run the dataset's `check(candidate)` here, with the candidate in another process."""
    import subprocess
    import traceback

    _make_undumpable()
    _signal.signal(_signal.SIGALRM, _on_alarm)
    cand = Candidate(spec, subprocess)
    ns = {"__name__": "checker", "__builtins__": __builtins__}
    ns.update({name: Remote(name) for name in spec.get("setup_names", ())})
    if hasattr(sys, "set_int_max_str_digits"):  # EvalPlus's tests hold integer literals
        sys.set_int_max_str_digits(0)           # past the default 4,300 digits
    try:
        exec(compile(spec.get("prelude", "") + "\n" + spec["test"], "check.py", "exec"), ns)
        ns[spec["fn_name"]] = cand  # the original ran prompt + completion + test in one module
        ns["check"](cand)
        fields = {"passed": cand.calls > 0, "calls": cand.calls}
        if not cand.calls:  # the test's fault, not the candidate's: no evidence either way
            fields.update(kind="bad_test", error="check() never called the candidate")
    except Deadline:
        fields = {"passed": False, "calls": cand.calls, "kind": "timeout",
                  "error": "time limit exceeded"}
    except _BaseException as e:
        where = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                 if f.filename == "check.py"]
        offset = spec.get("prelude", "").count("\n") + 1  # report lines of the test source
        fields = {"passed": False, "calls": cand.calls,
                  "error": (f"line {where[-1] - offset}: " if where else "")
                  + _type(e).__name__ + ": " + _str(e)[:300]}
    cand.proc.kill()
    chan.emit(record(dict(fields, i=0)))


def _make_undumpable():
    """PR_SET_DUMPABLE=0: same-uid children cannot read this process's memory or fds."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE) failed")


def main():
    stdin = os.fdopen(os.dup(0), "rb")
    spec = marshal.load(stdin)
    chan = Channel(spec["nonce"])
    modes = {"call": run_call, "stdio": run_stdio, "check": run_check}
    if spec["mode"] == "serve":
        run_serve(spec, chan, stdin)
    else:
        modes[spec["mode"]](spec, chan, stdin)
    _exit(0)  # do not wait for threads the candidate may have left running


if __name__ == "__main__":
    main()
