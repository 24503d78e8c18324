"""`scalerl score`: input order kept under concurrency, rows flushed as they finish, summary,
malformed rows (stop with exit 2 after earlier rows, or skip), real math and task rows."""

import io
import json
import threading
import time

import pytest

from scalerl.cli import main
from scalerl.commands.score import score_lines
from scalerl.envs import kinds, registry
from scalerl.envs.base import Score


@pytest.fixture(autouse=True)
def sleepy_kind(monkeypatch):
    """Kind `sleepy`: sleeps `answer` seconds, then is correct iff completion == "ok"."""
    registry.task_names()
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())

    def score(sample, completion, options, grading):
        time.sleep(float(sample.answer))
        ok = completion == "ok"
        return Score("correct" if ok else "wrong", f"slept {sample.answer}")

    kinds.register_kind(kinds.Kind("sleepy", score, "answer", ""), replace=True)


def rows_text(rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def sleepy(i, seconds, completion="ok"):
    return {"id": i, "kind": "sleepy", "completion": completion, "answer": str(seconds)}


def run_cli(tmp_path, rows, *extra):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(rows_text(rows))
    code = main(["score", str(src), "--out", str(out), *extra])
    return code, [json.loads(line) for line in out.read_text().splitlines()]


def test_output_keeps_input_order_when_later_rows_finish_first(tmp_path, capsys):
    rows = [sleepy("a", 0.4), sleepy("b", 0.0), sleepy("c", 0.2, "no"), sleepy("d", 0.0)]
    code, out = run_cli(tmp_path, rows, "--workers", "4")
    assert code == 0
    assert [r["id"] for r in out] == ["a", "b", "c", "d"]
    assert [r["status"] for r in out] == ["correct", "correct", "wrong", "correct"]
    assert set(out[0]) == {"id", "status", "reward", "detail", "latency_s"}
    assert out[0]["latency_s"] >= 0.4 and out[1]["latency_s"] < 0.2
    err = capsys.readouterr().err
    assert "scored 4 rows in" in err
    assert "correct 3, wrong 1, no_answer 0, timeout 0, error 0" in err


def test_workers_score_rows_concurrently(tmp_path):
    rows = [sleepy(i, 0.5) for i in range(4)]
    t0 = time.monotonic()
    code, out = run_cli(tmp_path, rows, "--workers", "4")
    assert code == 0 and len(out) == 4
    assert time.monotonic() - t0 < 1.5  # serially it would take 2.0 s


def test_rows_are_written_as_soon_as_they_and_earlier_rows_are_done():
    out = io.StringIO()
    lines = rows_text([sleepy(1, 0.0), sleepy(2, 2.0)]).splitlines(keepends=True)
    worker = threading.Thread(target=score_lines, args=(lines, out, io.StringIO()),
                              kwargs={"workers": 2, "skip_bad": False})
    worker.start()
    deadline = time.monotonic() + 1.5
    while '"id":1' not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.getvalue().count("\n") == 1  # row 1 is out while row 2 still sleeps
    worker.join()
    assert out.getvalue().count("\n") == 2


def test_malformed_row_stops_after_writing_earlier_rows(tmp_path, capsys):
    rows = [sleepy(1, 0.3), sleepy(2, 0.0), '{"id": 3, "kind": "sleepy", "completion": 5}',
            sleepy(4, 0.0)]
    code, out = run_cli(tmp_path, rows)
    assert code == 2
    assert [r["id"] for r in out] == [1, 2]
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == 'scalerl score: line 3: "completion" must be a string'
    assert "Traceback" not in "".join(err)


def test_skip_bad_reports_and_skips_malformed_rows(tmp_path, capsys):
    rows = [sleepy(1, 0), "{not json", '{"completion": "x", "kind": "sleepy", "answer": "0"}',
            {"id": 4, "kind": "chess", "completion": "e4"}, {"id": 5, "completion": "x"},
            {"id": 6, "task": "arith", "sample_id": "nope", "completion": "x"}, sleepy(7, 0)]
    code, out = run_cli(tmp_path, rows, "--skip-bad")
    assert code == 0 and [r["id"] for r in out] == [1, 7]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("line 2: invalid JSON (")
    assert err[1] == 'line 3: missing "id" (skipped)'
    assert err[2].startswith("line 4: unknown task kind 'chess'; known kinds: ")
    assert err[3].startswith('line 5: a row needs "kind"')
    assert err[4] == "line 6: task 'arith' has no sample 'nope' (skipped)"
    assert err[5].endswith("; skipped 5 malformed rows")


def test_a_kind_that_raises_is_an_error_row_not_a_zero(tmp_path, monkeypatch):
    def broken(sample, completion, options, grading):
        raise RuntimeError("verifier crashed")

    kinds.register_kind(kinds.Kind("broken", broken, "answer", ""), replace=True)
    code, out = run_cli(tmp_path, [{"id": 1, "kind": "broken", "completion": "x", "answer": "1"}])
    assert code == 0 and out[0]["status"] == "error" and "verifier crashed" in out[0]["detail"]


def test_real_math_rows_and_task_rows(tmp_path):
    rows = [
        {"id": "half", "kind": "math", "completion": "so \\boxed{\\frac{1}{2}}", "answer": "0.5"},
        {"id": "big", "kind": "math", "completion": "\\boxed{1/2^{98}}", "answer": "1/2^{99}"},
        {"id": "none", "kind": "math", "completion": "no idea", "answer": 3},
        {"id": "t", "task": "arith", "sample_id": "add2-59+70",
         "completion": "<think>9+0=9 5+7=12</think>\\boxed{129}"},
    ]
    code, out = run_cli(tmp_path, rows, "--workers", "2")
    assert code == 0
    assert [r["status"] for r in out] == ["correct", "wrong", "no_answer", "correct"]
    assert [r["reward"] for r in out] == [1.0, -1.0, -1.0, 1.0]


def test_missing_input_file_is_one_line_exit_2(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.jsonl" in err


INTERRUPTIBLE = """
import sys, time
from scalerl.cli import main
from scalerl.envs import kinds, registry
from scalerl.envs.base import Score

def score(sample, completion, options, grading):
    time.sleep(float(sample.answer))
    return Score("correct")

registry.task_names()
kinds.register_kind(kinds.Kind("sleepy", score, "answer", ""), replace=True)
sys.exit(main(["score", sys.argv[1], "--out", sys.argv[2], "--workers", "1"]))
"""


def test_interrupted_run_keeps_the_rows_it_scored(tmp_path):
    import signal
    import subprocess
    import sys

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(rows_text([sleepy(1, 0), sleepy(2, 3), sleepy(3, 0), sleepy(4, 0)]))
    # Ctrl-C's default action, as at a terminal: a suite started in the background (`make test &`)
    # ignores SIGINT, and a child inherits an ignored signal (Python then never raises
    # KeyboardInterrupt).
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTIBLE, str(src), str(out)],
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids in ([1], [1, 2])  # row 2 was running; rows 3 and 4 were dropped
    assert "interrupted" in err and "Traceback" not in err


def test_code_rows_run_in_the_sandbox(tmp_path):
    tests = {"type": "call", "fn_name": "f", "inputs": [[-6], [2]], "outputs": [-57, 7]}
    fence = "```python\ndef f(x):\n    return 8*x{}9\n```"
    rows = [{"id": "ok", "kind": "code", "completion": fence.format("-"), "tests": tests},
            {"id": "bad", "kind": "code", "completion": fence.format("+"), "tests": tests},
            {"id": "no_tests", "kind": "code", "completion": fence.format("-")}]
    code, out = run_cli(tmp_path, rows, "--skip-bad")
    assert code == 0
    assert [(r["id"], r["status"]) for r in out] == [("ok", "correct"), ("bad", "wrong")]
