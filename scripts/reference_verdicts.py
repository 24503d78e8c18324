"""Reference verdicts for the code verifier's `lcb` and `taco` rules, from the references' code.

Builds a corpus of (program output, expected output) and (returned value, expected value) pairs
(whitespace, blank lines, case, Decimal forms, big integers, floats near the tolerance, order,
wrapping) and has the reference graders judge each one:
- LiveCodeBench: `grade_stdio` and `grade_call_based` of lcb_runner/evaluation/testing_util.py,
  run on a program that prints (or returns) the pair's output;
- DeepCoder's TACO checker: `compare_std_results` (after `clean_stdout`, on text decoded as
  `subprocess.run(text=True)` decodes it) and `execute_cb_code` (after `process_input_output`) of
  rllm/rewards/code_utils/taco.py, its functions read from the file (the module imports rllm).
The references are read from git checkouts at the given revisions, never copied into this
repository; the verdicts go to a JSON file the tests compare the rules with
(tests/envs/code/test_rules.py). Needs numpy (the references import it). A maintainer's tool:

    python scripts/reference_verdicts.py --lcb-repo DIR [--lcb-rev REV] \\
        --rllm-repo DIR [--rllm-rev REV] --out tests/envs/code/data/reference_verdicts.json
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import subprocess
import sys
import types
from typing import Any

LCB_PATH = "lcb_runner/evaluation/testing_util.py"
TACO_PATH = "rllm/rewards/code_utils/taco.py"
TACO_FUNCTIONS = ("clean_stdout", "stripped_string_compare", "compare_std_results",
                  "process_input_output", "execute_cb_code")


def source(repo: str, rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def load_lcb(text: str) -> types.ModuleType:
    module = types.ModuleType("lcb_testing_util")
    exec(compile(text, LCB_PATH, "exec"), module.__dict__)
    return module


def load_taco(text: str) -> dict[str, Any]:
    """The named functions of taco.py, defined in a namespace with what they use."""
    import faulthandler
    import signal

    import numpy as np

    tree = ast.parse(text)
    ns: dict[str, Any] = {"np": np, "signal": signal, "faulthandler": faulthandler,
                          "reliability_guard": lambda *a, **k: None}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EXECUTION_RESULTS" for t in node.targets):
            exec(compile(ast.Module([node], []), TACO_PATH, "exec"), ns)
        if isinstance(node, ast.FunctionDef) and node.name in TACO_FUNCTIONS:
            exec(compile(ast.Module([node], []), TACO_PATH, "exec"), ns)
    missing = [f for f in TACO_FUNCTIONS if f not in ns]
    if missing:
        raise SystemExit(f"{TACO_PATH}: functions not found: {missing}")
    return ns


# --- the corpus ------------------------------------------------------------------------------
EXPECTED = [
    "3", "3\n", "-7\n", "0\n", "1 2 3\n", "1\n2\n3\n", "YES\n", "Yes\n", "hello world\n",
    "a b\nc\n", "0.5\n", "3.14159265\n", "0.333333333\n", "1000000000000000000\n",
    "123456789012345678901234567890\n", "1e18\n", "2.0\n", "1.0 2.5\n", "", "\n", "x\n\ny\n",
    "1 1\n2 2\n", "100000\n", "12\n", "1\n2\n", "a\n", "nan\n", "inf\n", "  spaced  \n",
    "1.5e-7\n", "-0\n", "007\n", "99999.5\n", "ab\n", "1 2\n", "3 1 2\n", "2 1\n", "1\n1\n2\n",
    "10\n", "1000001\n", "0.1 0.2\n", "Alice Bob\n", "NO\n", "abc def\n", "1/2\n", "1,000\n",
    "1000000007\n", "999999999999999999999\n", "3.0000001\n", "12345.678\n", "-1.5\n",
]


def numeric_variants(token: str) -> list[str]:
    """Near and equal spellings of a numeric token: off by one, float forms, rounding."""
    out = []
    try:
        value = int(token)
    except ValueError:
        value = None
    if value is not None:
        out += [str(value + 1), str(value - 1), f"{value}.0", f"{value}e0", f"+{value}",
                f"0{value}" if value >= 0 else f"-0{-value}", repr(float(value)),
                f"{float(value):.6e}", str(value * 10), f"{value}.00001"]
    try:
        number = float(token)
    except ValueError:
        return out
    if number == number and abs(number) != float("inf"):
        out += [f"{number:.2f}", f"{number:.4f}", f"{number:.6f}", repr(number * (1 + 1e-6)),
                repr(number * (1 + 1e-4)), repr(number + 1e-9), repr(number + 2e-8),
                f"{number:e}", repr(-number)]
    return out


def _retoken(text: str, change) -> list[str]:
    """`text` with each numeric token changed, one at a time, by `change`."""
    lines = text.split("\n")
    outs = []
    for li, line in enumerate(lines):
        tokens = line.split(" ")
        for ti, tok in enumerate(tokens):
            for new in change(tok):
                t2 = tokens[:ti] + [new] + tokens[ti + 1:]
                outs.append("\n".join(lines[:li] + [" ".join(t2)] + lines[li + 1:]))
    return outs


def layout_variants(e: str) -> list[str]:
    """Whitespace, blank line, case, order and structure changes of an expected output."""
    lines = e.strip("\n").split("\n")
    tokens = e.split()
    return [
        e, e.rstrip("\n"), e + "\n", e + "\n\n", "\n" + e, e.replace("\n", "\r\n"),
        "\n".join(line + "  " for line in lines), "\n".join("  " + line for line in lines),
        e.replace(" ", "  "), e.replace(" ", "\t"), "\n\n".join(lines), " ".join(lines),
        "\n".join(tokens), e.upper(), e.lower(), e.swapcase(), " ".join(reversed(tokens)),
        "\n".join(reversed(lines)), "".join(tokens), e.replace("\n", "\r"),
        " ".join(tokens[:-1]), e + e, " ".join(sorted(tokens)), "\n".join(sorted(set(tokens))),
        e.replace("\n", " \n"), "",
    ]


def stdio_corpus() -> list[tuple[str, str]]:
    pairs = set()
    for e in EXPECTED:
        for out in layout_variants(e) + _retoken(e, numeric_variants):
            pairs.add((out, e))
    for a, b in itertools.product(EXPECTED, repeat=2):
        pairs.add((a, b))
    extra = [("YES", "NO"), ("NO", "YES"), ("yes", "YES"), ("1e18", "1000000000000000001"),
             ("1000000000000000000", "1000000000000000001"), ("12", "1\n2"), ("21", "1 2"),
             ("2\n1", "1\n2"), ("1_000", "1000"), ("Infinity", "inf"), ("0.30000000000000004",
             "0.3"), ("1.0", "1"), ("1E0", "1"), ("1.", "1"), (".5", "0.5"), ("5e-1", "0.5"),
             ("-0.0", "0"), ("0x10", "16"), ("١٢", "12"), ("1 2", "1  2"), ("a  b", "a b"),
             ("sNaN", "sNaN"), ("NaN", "NaN"), ("inf", "inf"), ("1e400", "1e401")]
    pairs.update(extra)
    return sorted(pairs)


CALL_EXPECTED = [3, 0, -1, 10**18 + 1, 10**18, 2.5, 0.1, "abc", "", True, False, None,
                 [1, 2, 3], [], [[1, 2], [3, 4]], {"a": 1}, {"1": 2, "3": 4}, [3], [[1, 2]],
                 [True], ["x", "y"], [1.5, 2.5], [{"1": "a"}], [0.30000000000000004],
                 [10**20], [[]], [None]]


def call_actuals(e: Any) -> list[Any]:
    out = [e, [e], (e,), None, 0, str(e)]
    if isinstance(e, bool):
        out += [int(e), not e]
    elif isinstance(e, int):
        out += [e + 1, e - 1, float(e), e * 1.0 + 0.5]
    elif isinstance(e, float):
        out += [round(e, 1), e + 1e-9, int(e)]
    elif isinstance(e, list):
        out += [tuple(e), list(reversed(e)), e[:-1], set(map(repr, e))]
        if e:
            out += [e[0], [e[0]], tuple(e[0]) if isinstance(e[0], list) else e[0]]
            if all(isinstance(x, list) for x in e):
                out += [[tuple(x) for x in e], tuple(tuple(x) for x in e)]
            if all(isinstance(x, int) and not isinstance(x, bool) for x in e):
                out += [[float(x) for x in e], [x + 1 for x in e]]
            if isinstance(e[0], list):
                out += [[tuple(e[0])], tuple(e[0])]
            if isinstance(e[0], dict):
                out += [{int(k): v for k, v in e[0].items()}]
    elif isinstance(e, dict):
        out += [{int(k) if k.isdigit() else k: v for k, v in e.items()}, list(e.items()),
                dict(reversed(list(e.items())))]
    return out


def literal(value: Any) -> str:
    """repr(value), with a set's elements in a fixed order (string hashes vary by run)."""
    if isinstance(value, set):
        return "{" + ", ".join(sorted(map(repr, value))) + "}"
    return repr(value)


def call_corpus() -> list[tuple[Any, Any]]:
    seen, pairs = set(), []
    for e in CALL_EXPECTED:
        for a in call_actuals(e):
            key = (literal(a), json.dumps(e))
            if key not in seen:
                seen.add(key)
                pairs.append((a, e))
    return pairs


# --- the references' verdicts ----------------------------------------------------------------
def lcb_stdio(lcb: types.ModuleType, out: str, expected: str) -> bool:
    program = f"print({out!r}, end='')"
    graded = lcb.grade_stdio(program, [""], [expected], 6)
    return graded is not None and graded[0] == [True]


def lcb_call(lcb: types.ModuleType, actual: Any, expected: Any) -> bool:
    program = f"def f(*args):\n    return {actual!r}\n"
    graded = lcb.grade_call_based(program, ["null"], [json.dumps(expected)], "f", 6)
    return graded is not None and graded[0] == [True]


def taco_stdio(taco: dict[str, Any], out: str, expected: str) -> bool:
    text = out.replace("\r\n", "\n").replace("\r", "\n")  # subprocess.run(text=True)
    try:
        return bool(taco["compare_std_results"](taco["clean_stdout"](text), expected))
    except Exception:  # noqa: BLE001 - the reference's own crash is a failed test there
        return False


def taco_call(taco: dict[str, Any], actual: Any, expected: Any) -> bool:
    inputs, outputs = taco["process_input_output"]([None], json.loads(json.dumps(expected)))
    results, _ = taco["execute_cb_code"](lambda *a: actual, [inputs], [outputs], timeout=6,
                                         early_stop=True, debug=False)
    return results[0][0] is True


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lcb-repo", required=True)
    ap.add_argument("--lcb-rev", default="HEAD")
    ap.add_argument("--rllm-repo", required=True)
    ap.add_argument("--rllm-rev", default="aba20b14", help="DeepCoder's release (April 2025)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    revs = {name: subprocess.run(["git", "-C", repo, "rev-parse", rev], check=True, text=True,
                                 capture_output=True).stdout.strip()
            for name, repo, rev in (("lcb", args.lcb_repo, args.lcb_rev),
                                    ("rllm", args.rllm_repo, args.rllm_rev))}
    lcb = load_lcb(source(args.lcb_repo, revs["lcb"], LCB_PATH))
    taco = load_taco(source(args.rllm_repo, revs["rllm"], TACO_PATH))
    stdio = [[o, e, lcb_stdio(lcb, o, e), taco_stdio(taco, o, e)] for o, e in stdio_corpus()]
    call = [[literal(a), json.dumps(e), lcb_call(lcb, a, e), taco_call(taco, a, e)]
            for a, e in call_corpus()]
    doc = {"about": "verdicts of LiveCodeBench's and DeepCoder's TACO checkers, made by "
                    "scripts/reference_verdicts.py",
           "sources": {"lcb": f"LiveCodeBench/LiveCodeBench@{revs['lcb']}:{LCB_PATH}",
                       "taco": f"rllm-org/rllm@{revs['rllm']}:{TACO_PATH}"},
           "stdio_columns": ["output", "expected", "lcb", "taco"], "stdio": stdio,
           "call_columns": ["repr(returned)", "json(expected)", "lcb", "taco"], "call": call}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, indent=0)
        fh.write("\n")
    print(f"{len(stdio)} stdio and {len(call)} call pairs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
