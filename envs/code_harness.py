"""The program that runs INSIDE the sandbox to grade code; stdlib only, started as `python -I`.

Modes (the first stdin line is a JSON spec with `mode` and a per-run `nonce`):
- `call`: import `prog.py` once, call `fn_name` on each test's arguments with a per-call deadline
  and print each result as strict tagged JSON (plain types only, checked with `type(x) is int`
  captured before the candidate runs). The PARENT compares; expected values are never sent here.
- `stdio`: run `python -I prog.py` once per test (its own process group and deadline), stdin from
  the test input, stdout to a capped file; report the output, the parent compares.
- `check`: HumanEval asserts that could not be turned into call tests. This process (trusted,
  non-dumpable) runs `check` and relays every `candidate(...)` call to a second process (`serve`
  mode) holding the candidate, so the candidate never shares a process with the expected values.
Result lines are `<nonce> <json>` on the harness's private copy of fd 1; the candidate's own fd 1 is
pointed at stderr. Nothing here decides pass/fail for `call`/`stdio`: the parent does.
"""

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time

# Captured before any candidate code can patch builtins or modules.
_type, _len, _repr, _str, _isfinite = type, len, repr, str, math.isfinite
_dumps, _loads, _write, _exit = json.dumps, json.loads, os.write, os._exit
_monotonic, _setitimer, _BaseException = time.monotonic, signal.setitimer, BaseException
MAX_DEPTH = 100


class NotPlain(Exception):
    """A value that is not made of plain types (None, bool, int, float, str, list, tuple, dict)."""


class Deadline(BaseException):
    """Raised by SIGALRM when a call passes its deadline."""


def encode(x, depth=0):
    """Tagged strict JSON: lists are arrays; tuple/dict/set are {"tuple"|"dict"|"set": [...]}."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    t = _type(x)
    if x is None or t is bool or t is str or t is int:
        return x
    if t is float:
        if not _isfinite(x):
            raise NotPlain("non-finite float " + _repr(x))
        return x
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"tuple": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {"set": [encode(v, depth + 1) for v in x]}
    raise NotPlain("value of type " + t.__name__)


def decode(x):
    """Inverse of `encode` (used by `check` mode on the serve process's answers)."""
    t = _type(x)
    if t is list:
        return [decode(v) for v in x]
    if t is dict:
        if _len(x) != 1:
            raise NotPlain("malformed tagged value")
        (tag, items), = x.items()
        if tag == "tuple":
            return tuple(decode(v) for v in items)
        if tag == "dict":
            return {decode(k): decode(v) for k, v in items}
        if tag == "set":
            return {decode(v) for v in items}
        raise NotPlain("unknown tag " + _repr(tag))
    return x


class Channel:
    """The harness's private copy of fd 1; the candidate's fd 1 now writes to stderr."""

    def __init__(self, nonce):
        self.fd = os.dup(1)
        os.dup2(2, 1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        self.nonce = nonce

    def emit(self, record):
        data = (self.nonce + " " + _dumps(record, allow_nan=False) + "\n").encode()
        while data:
            data = data[_write(self.fd, data):]


def _on_alarm(signum, frame):
    raise Deadline()


def load_candidate(prelude, source):
    """Run the prelude then the candidate's code in a fresh module namespace (not __main__)."""
    ns = {"__name__": "candidate", "__builtins__": __builtins__}
    exec(compile(prelude + "\n" + source, "prog.py", "exec"), ns)
    return ns


def resolve(ns, fn_name):
    if fn_name in ns:
        return ns[fn_name]
    if "Solution" in ns:  # LeetCode / LiveCodeBench style
        return getattr(ns["Solution"](), fn_name)
    raise NameError("name " + _repr(fn_name) + " is not defined")


def timed_call(fn, args, kwargs, timeout_s):
    """One call under a deadline -> record (without the index)."""
    start = _monotonic()
    _setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        value = fn(*args, **kwargs)
    except Deadline:
        return {"ok": False, "kind": "timeout", "error": "time limit exceeded"}
    except _BaseException as e:  # the candidate's exception, incl. SystemExit
        return _failure("exception", e)
    finally:
        _setitimer(signal.ITIMER_REAL, 0)
    if _monotonic() - start > timeout_s:
        return {"ok": False, "kind": "timeout", "error": "time limit exceeded (deadline caught)"}
    try:
        return {"ok": True, "value": encode(value)}
    except (NotPlain, RecursionError, ValueError) as e:
        return {"ok": False, "kind": "not_plain", "error": _str(e)[:200]}


def _failure(kind, e):
    return {"ok": False, "kind": kind, "error": _type(e).__name__ + ": " + _str(e)[:200]}


def import_with_deadline(spec, timeout_s):
    """(namespace, None) or (None, error record) for the candidate's module-level code."""
    _setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return load_candidate(spec.get("prelude", ""), open("prog.py").read()), None
    except Deadline:
        return None, {"ok": False, "kind": "timeout", "error": "time limit exceeded at import"}
    except _BaseException as e:
        return None, _failure("import", e)
    finally:
        _setitimer(signal.ITIMER_REAL, 0)


def run_call(spec, chan):
    signal.signal(signal.SIGALRM, _on_alarm)
    timeout_s = spec["timeout_s"]
    ns, err = import_with_deadline(spec, timeout_s)
    fn = None
    if ns is not None:
        try:
            fn = resolve(ns, spec["fn_name"])
        except _BaseException as e:
            err = _failure("import", e)
    for i, call in enumerate(spec["calls"]):
        if fn is None:
            record = err
        else:
            record = timed_call(fn, decode(call["args"]), decode(call.get("kwargs", {"dict": []})),
                                timeout_s)
        chan.emit(dict(record, i=i))


def run_serve(spec, chan, requests):
    """Answer one call per request line until EOF (the `check` process drives this)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    ns, err = import_with_deadline(spec, spec["timeout_s"])
    fn = resolve(ns, spec["fn_name"]) if ns is not None else None
    for line in requests:
        req = _loads(line)
        record = err if fn is None else timed_call(
            fn, decode(req["args"]), decode(req["kwargs"]), spec["timeout_s"])
        chan.emit(record)


def run_stdio_test(i, data, timeout_s, out_cap):
    with open(".in", "wb") as f:
        f.write(data.encode())
    with open(".in", "rb") as fin, open(".out", "wb") as fout, open(".err", "wb") as ferr:
        start = _monotonic()
        proc = subprocess.Popen([sys.executable, "-I", "prog.py"], stdin=fin, stdout=fout,
                                stderr=ferr, start_new_session=True, close_fds=True)
        try:
            code = proc.wait(timeout=timeout_s)
            status = "ok" if code == 0 else "runtime_error"
        except subprocess.TimeoutExpired:
            code, status = None, "timeout"
        elapsed = _monotonic() - start
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with open(".out", "rb") as f:
        out = f.read(out_cap + 1)
    with open(".err", "rb") as f:
        err = f.read(2000)
    if _len(out) > out_cap:
        status, out = "output_limit", out[:out_cap]
    return {"i": i, "status": status, "exit": code, "wall_s": round(elapsed, 4),
            "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace")}


def run_stdio(spec, chan):
    for i, data in enumerate(spec["inputs"]):
        chan.emit(run_stdio_test(i, data, spec["timeout_s"], spec["out_cap"]))


class Candidate:
    """`candidate(...)` inside `check`: relays the call to the serve process, decodes its answer."""

    def __init__(self, spec, nonce):
        serve = dict(spec, mode="serve", nonce=nonce)
        self.proc = subprocess.Popen([sys.executable, "-I", "harness.py"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, close_fds=True)
        self.proc.stdin.write((_dumps(serve) + "\n").encode())
        self.proc.stdin.flush()
        self.nonce, self.timeout_s, self.calls = nonce, spec["timeout_s"], 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        req = {"args": encode(list(args)), "kwargs": encode(kwargs)}
        self.proc.stdin.write((_dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        _setitimer(signal.ITIMER_REAL, self.timeout_s + 1.0)
        try:
            line = self.proc.stdout.readline(64 << 20)
        finally:
            _setitimer(signal.ITIMER_REAL, 0)
        prefix = (self.nonce + " ").encode()
        if not line.startswith(prefix):
            raise RuntimeError("candidate process gave no answer (exited or garbled)")
        record = _loads(line[_len(prefix):])
        if not record.get("ok"):
            raise RuntimeError("candidate call failed: " + _str(record.get("error")))
        return decode(record["value"])


def run_check(spec, chan):
    """Run the dataset's `check(candidate)` here, with the candidate in another process."""
    _make_undumpable()
    signal.signal(signal.SIGALRM, _on_alarm)
    helper_nonce = os.urandom(16).hex()
    cand = Candidate(spec, helper_nonce)
    ns = {"__name__": "checker", "__builtins__": __builtins__}
    try:
        exec(compile(spec.get("prelude", "") + "\n" + spec["test"], "check.py", "exec"), ns)
        ns[spec["fn_name"]] = cand  # the original ran prompt + completion + test in one module
        ns["check"](cand)
        record = {"passed": cand.calls > 0, "calls": cand.calls,
                  "error": "" if cand.calls else "check() never called the candidate"}
    except Deadline:
        record = {"passed": False, "calls": cand.calls, "kind": "timeout",
                  "error": "time limit exceeded"}
    except _BaseException as e:
        record = {"passed": False, "calls": cand.calls,
                  "error": _type(e).__name__ + ": " + _str(e)[:300]}
    cand.proc.kill()
    chan.emit(dict(record, i=0))


def _make_undumpable():
    """PR_SET_DUMPABLE=0: same-uid children cannot read this process's memory or fds."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE) failed")


def main():
    stdin = os.fdopen(os.dup(0), "rb")
    spec = _loads(stdin.readline())
    chan = Channel(spec["nonce"])
    mode = spec["mode"]
    if mode == "stdio":
        _make_undumpable()
        run_stdio(spec, chan)
    elif mode == "call":
        run_call(spec, chan)
    elif mode == "serve":
        run_serve(spec, chan, stdin)
    elif mode == "check":
        run_check(spec, chan)
    else:
        raise SystemExit("unknown mode " + _repr(mode))
    _exit(0)  # do not wait for threads the candidate may have left running


if __name__ == "__main__":
    main()
