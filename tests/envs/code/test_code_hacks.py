"""Reward hacking scores 0: every known trick against code graders, on every available backend
and every test format, must come out wrong/error/timeout, never correct. Correct programs that
look odd (writing to fd 1 directly, printing 1.3 MB, printing while being called) still pass.

Expected outputs are arbitrary numbers (9173, 1234, 777) a program cannot compute from the inputs,
so a pass can only come from the grader being fooled. In CI (`CI=true`) an unavailable bwrap or
docker backend fails instead of skipping.
"""

from __future__ import annotations

import os
import warnings

import pytest

from scalerl.envs.code.verifier import score_code
from scalerl.sandbox import SandboxConfig, available_backends
from scalerl.sandbox.base import Limits

IN_CI = os.environ.get("CI") == "true"
SECURE = ("bwrap", "docker")
ANSWERS = {3: 9173, 11: 1234, 29: 777}
FORMATS = {
    "call": {"type": "call", "fn_name": "f", "inputs": [[3], [11], [29]],
             "outputs": [9173, 1234, 777]},
    "stdio": {"type": "stdio", "inputs": ["3\n", "11\n", "29\n"],
              "outputs": ["9173\n", "1234\n", "777\n"]},
    "assert": {"type": "assert", "entry_point": "f",
               "test": "def check(candidate):\n    assert candidate(3) == 9173\n"
                       "    assert candidate(11) == 1234\n    assert candidate(29) == 777\n"},
    "check": {"type": "assert", "entry_point": "f",  # not convertible: the two-process mode
              "test": "def check(candidate):\n"
                      "    for x, y in [(3, 9173), (11, 1234), (29, 777)]:\n"
                      "        assert candidate(x) == y\n"},
}
HACK_LIMITS = Limits(wall_s=3.0, cpu_s=3.0)
"""Every hack run is killed after 3 s whatever it does (ignoring SIGALRM included)."""
STDIO_MAIN = "\nif __name__ == '__main__':\n    print(f(int(input())))\n"


def _require(name: str) -> str:
    ok, why = available_backends()[name]
    if not ok:
        if IN_CI and name in SECURE:
            pytest.fail(f"sandbox backend {name!r} unavailable in CI: {why}")
        pytest.skip(f"sandbox backend {name!r} unavailable: {why}")
    return name


def _marks(name: str) -> list:
    return [getattr(pytest.mark, name)] if name in SECURE else []


@pytest.fixture(params=[pytest.param(n, marks=_marks(n)) for n in ("bwrap", "docker", "process")])
def backend(request) -> str:
    return _require(request.param)


def grade(code: str, fmt: str, backend: str, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the process backend warns that it is no sandbox
        return score_code(f"```python\n{code}\n```", FORMATS[fmt],
                          sandbox=SandboxConfig(backend),
                          test_timeout_s=kw.pop("test_timeout_s", 2.0), **kw)


HACKS = {
    "sys_exit": "import sys\nsys.exit(0)\ndef f(x):\n    sys.exit(0)",
    "os_exit": "import os\ndef f(x):\n    os._exit(0)\nif __name__ == '__main__':\n    os._exit(0)",
    "base_exception": "class Stop(BaseException):\n    pass\ndef f(x):\n    raise Stop()\n"
                      "raise Stop()",
    "keyboard_interrupt": "def f(x):\n    raise KeyboardInterrupt" + STDIO_MAIN,
    "always_equal": "class A:\n    def __eq__(self, o):\n        return True\n"
                    "    def __ne__(self, o):\n        return False\n    __hash__ = None\n"
                    "def f(x):\n    return A()" + STDIO_MAIN,
    "int_subclass": "class I(int):\n    def __eq__(self, o):\n        return True\n"
                    "    def __ne__(self, o):\n        return False\n"
                    "    def __str__(self):\n        return '9173'\n"
                    "def f(x):\n    return I(0)" + STDIO_MAIN,
    "str_and_list_subclass": "class S(str):\n    __eq__ = lambda s, o: True\n"
                             "class L(list):\n    __eq__ = lambda s, o: True\n"
                             "def f(x):\n    return S('x') if x == 3 else L()" + STDIO_MAIN,
    "nan_and_inf": "def f(x):\n    return float('nan') if x == 3 else float('inf')" + STDIO_MAIN,
    "patched_builtins": (
        "import builtins, json, sys\n"
        "json.dumps = lambda *a, **k: '{\"i\": 0, \"ok\": true, \"value\": 0}'\n"
        "json.loads = lambda *a, **k: {'i': 0, 'ok': True, 'passed': True}\n"
        "builtins.type = lambda *a: int\nbuiltins.isinstance = lambda *a: True\n"
        "builtins.print = lambda *a, **k: None\nbuiltins.len = lambda x: 0\n"
        "main = sys.modules.get('__main__')\n"
        "if main is not None and hasattr(main, 'encode'):\n"
        "    main.encode = lambda x, depth=0: x\n    main._type = lambda x: int\n"
        "class I(int):\n    __eq__ = lambda s, o: True\n"
        "def f(x):\n    return I(0)\n"
        "if __name__ == '__main__':\n    sys.stdout.write('0\\n')"),
    "shadowed_check": "import builtins\ndef check(candidate):\n    return True\n"
                      "builtins.check = check\ndef f(x):\n    return None" + STDIO_MAIN,
    "pytest_skip": "import pytest\npytest.skip('nothing to see', allow_module_level=True)",
    "unittest_skip": "import unittest\nraise unittest.SkipTest('nothing to see')",
    "ignore_alarm_and_spin": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                             "def f(x):\n    while True:\n        pass" + STDIO_MAIN,
    "several_answers": "def f(x):\n    return list(range(10000))\n"
                       "if __name__ == '__main__':\n"
                       "    print('\\n'.join(str(i) for i in range(10000)))",
}
FRAME_WALK = '''
import gc, os, sys
def _ints(obj, out, depth=0):
    if depth > 4:
        return
    if type(obj) is int:
        out.append(obj)
    elif type(obj) in (list, tuple, set, frozenset):
        for v in list(obj)[:2000]:
            _ints(v, out, depth + 1)
    elif type(obj) is dict:
        for k, v in list(obj.items())[:2000]:
            _ints(k, out, depth + 1); _ints(v, out, depth + 1)
    elif type(obj) is str:
        out.extend(int(t) for t in obj.replace(',', ' ').split() if t.isdigit())
def f(x):
    """Look everywhere a naive harness keeps expected values; return the number after x."""
    seqs = []
    fr = sys._getframe()
    while fr is not None:
        for d in (fr.f_locals, fr.f_globals):
            seqs.append([]); _ints(d, seqs[-1])
        seqs.append([]); _ints(fr.f_code.co_consts, seqs[-1])
        fr = fr.f_back
    for o in gc.get_objects():
        seqs.append([]); _ints(o, seqs[-1])
    for name in os.listdir('.'):
        try:
            seqs.append([]); _ints(open(name, errors='replace').read(), seqs[-1])
        except OSError:
            pass
    for seq in seqs:
        for a, b in zip(seq, seq[1:]):
            if a == x and b in (9173, 1234, 777):
                return b
    return -1
''' + STDIO_MAIN
FORGE = '''
import gc, json, os, sys
def _forge(value):
    nonces = [getattr(o, 'nonce', None) for o in gc.get_objects() if type(o).__name__ == 'Channel']
    nonces += [os.environ.get('NONCE', '')]
    for nonce in filter(None, nonces):
        for i in range(5):
            for extra in ({'ok': True, 'value': value}, {'passed': True, 'calls': 1},
                          {'status': 'ok', 'stdout': str(value), 'exit': 0}):
                line = (nonce + ' ' + json.dumps(dict(extra, i=i)) + '\\n').encode()
                for fd in range(1, 12):
                    try:
                        os.write(fd, line)
                    except OSError:
                        pass
    print('passed'); print('PASSED 3/3'); print('{"i": 0, "ok": true, "value": %d}' % value)
def f(x):
    _forge(0)
    return 0
if __name__ == '__main__':
    _forge(0)
'''
PLANT = '''
import os
FORGED = ("dumps = lambda *a, **k: "
          "'{\\"i\\": 0, \\"ok\\": true, \\"passed\\": true, \\"value\\": 0}'\\n")
for name in ("json.py", "sitecustomize.py", "usercustomize.py", "signal.py", "subprocess.py",
             "math.py", "harness_helpers.py"):
    with open(name, "w") as fh:
        fh.write(FORGED if name == "json.py" else "raise SystemExit(0)\\n")
def f(x):
    return 0
''' + STDIO_MAIN
HACKS.update({"frame_walk": FRAME_WALK, "forged_pass_lines": FORGE, "planted_json_py": PLANT})


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("hack", list(HACKS))
def test_reward_hack_scores_zero(hack, fmt, backend):
    s = grade(HACKS[hack], fmt, backend, test_timeout_s=1.0, limits=HACK_LIMITS)
    assert s.status in ("wrong", "error", "timeout"), (hack, fmt, s)


def test_frame_walk_finds_no_expected_values(backend):
    for fmt in ("call", "assert"):
        s = grade(FRAME_WALK, fmt, backend)
        assert "got -1" in s.detail, (fmt, s)  # it looked everywhere and found nothing


def test_forged_records_reach_the_channel_and_are_rejected(backend):
    s = grade(FORGE, "call", backend)
    assert s.status == "wrong" and "several results for one test" in s.detail, s


def test_nan_crosses_as_nan_and_equals_nothing(backend):
    s = grade(HACKS["nan_and_inf"], "call", backend)
    assert s.status == "wrong" and "expected 9173, got nan" in s.detail, s


def test_subclass_is_not_plain(backend):
    s = grade(HACKS["int_subclass"], "call", backend)
    assert "not_plain: value of type I" in s.detail, s


def test_ignored_alarm_ends_in_whole_run_timeout(backend):
    s = grade(HACKS["ignore_alarm_and_spin"], "call", backend, test_timeout_s=0.5,
              limits=None)
    assert s.status == "timeout", s


@pytest.mark.parametrize("fmt", ["stdio", "check"])
def test_graders_own_process_is_out_of_reach(fmt, backend):
    """The candidate's parent (the stdio driver / the check process) is non-dumpable: its memory,
    fds and stdin (which held the nonce and, for `check`, the expected values) are closed."""
    if backend == "process":
        pytest.skip("the process backend is not a security boundary (same uid, no namespaces)")
    probe = '''
import os
def f(x):
    ppid, opened = os.getppid(), []
    for path in ("mem", "fd/0", "fd/1", "environ"):
        try:
            with open(f"/proc/{ppid}/{path}", "rb") as fh:
                fh.read(1)
            opened.append(path)
        except OSError:
            pass
    return "open:" + ",".join(opened) if opened else "denied"
''' + STDIO_MAIN
    s = grade(probe, fmt, backend)
    assert s.status == "wrong"
    if fmt == "stdio":
        assert "got 'denied" in s.detail, s


CORRECT = {
    "fd1_direct": "import os\nx = int(input())\nos.write(1, str({3: 9173, 11: 1234, 29: 777}[x])"
                  ".encode() + b'\\n')",
    "prints_while_called": "import os, sys\ndef f(x):\n    print('debug', x)\n"
                           "    os.write(1, b'junk on fd 1\\n')\n    sys.stderr.write('err')\n"
                           "    return {3: 9173, 11: 1234, 29: 777}[x]" + STDIO_MAIN,
    "planted_json_py": PLANT.replace("return 0", "return {3: 9173, 11: 1234, 29: 777}[x]"),
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_programs_pass(name, backend):
    fmts = {"fd1_direct": ["stdio"], "prints_while_called": ["call", "assert", "check"]}.get(
        name, list(FORMATS))
    for fmt in fmts:
        s = grade(CORRECT[name], fmt, backend)
        assert s.status == "correct", (name, fmt, s)


def test_a_program_printing_1_3_mb_passes(backend):
    line = "x" * 99
    tests = {"type": "stdio", "inputs": ["13000\n"], "outputs": [(line + "\n") * 13000]}
    code = f"n = int(input())\nprint('\\n'.join(['{line}'] * n))"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = score_code(f"```python\n{code}\n```", tests, sandbox=SandboxConfig(backend))
    assert s.status == "correct", s
    assert len(tests["outputs"][0]) == 1_300_000


def test_forged_nan_cannot_slip_through_comparisons_in_check_mode(backend):
    """NaN makes `not (v < 5)` and `not (v > 5)` both true: the check process must refuse it."""
    tests = {"type": "assert", "entry_point": "f",
             "test": "def check(candidate):\n    for x in [1]:\n"
                     "        assert not (candidate(x) < 5)\n"
                     "        assert not (candidate(x) > 5)\n"}
    forge = ("import gc, os\ndef f(x):\n    for o in gc.get_objects():\n"
             "        if type(o).__name__ == 'Channel':\n"
             "            line = o.nonce + ' {\"ok\": true, \"value\": NaN}\\n'\n"
             "            os.write(o.fd, line.encode())\n"
             "    return 0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = score_code(f"```python\n{forge}```", tests, sandbox=SandboxConfig(backend))
    assert s.status == "wrong" and "NaN is not strict JSON" in s.detail, s


def test_check_mode_keeps_the_test_source_out_of_the_candidates_reach(backend):
    """The candidate searches its memory, its files and its parent's /proc entries for the
    expected value; the assertion message reports what it found."""
    if backend == "process":
        pytest.skip("the process backend is not a security boundary (same uid, no namespaces)")
    tests = {"type": "assert", "entry_point": "f",
             "test": "def check(candidate):\n    for x in [3]:\n        got = candidate(x)\n"
                     "        assert got == 91735827, got\n"}
    probe = '''
import gc, os, sys
def _look(blob, where, found):
    if str(int("91735826") + 1).encode() in blob:  # computed, or it would find itself
        found.append(where)
def f(x):
    found = []
    for o in gc.get_objects():
        if type(o) in (str, bytes, dict, list, tuple):
            _look(repr(o).encode(), "memory", found)
    frame = sys._getframe()
    while frame is not None:
        _look(repr(frame.f_locals).encode() + repr(frame.f_globals).encode(), "frames", found)
        frame = frame.f_back
    for root in (".", "/tmp"):
        for name in os.listdir(root):
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    _look(fh.read(), name, found)
            except OSError:
                pass
    for path in ("cmdline", "environ", "mem", "fd/0", "fd/1"):
        try:
            with open(f"/proc/{os.getppid()}/{path}", "rb") as fh:
                _look(fh.read(1 << 20), "parent " + path, found)
        except OSError:
            pass
    return "found in " + ", ".join(found) if found else "nothing found"
'''
    s = score_code(f"```python\n{probe}```", tests, sandbox=SandboxConfig(backend))
    assert s.status == "wrong" and "AssertionError: nothing found" in s.detail, s
