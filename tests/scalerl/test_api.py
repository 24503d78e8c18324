"""scalerl.api: the four jobs from Python give what their commands give, and fail with their lines.

Fast tests call `score` and `evaluate(rollouts=...)` in this process and compare with the command
(`scalerl.cli.main`) on the same input; the argument errors of all four need no engine. Scripts
run as a user's would (subprocesses, no `if __name__ == "__main__":`, from a file and fed on
stdin) must get real math and code verdicts: before the fix, the math verifier's workers re-ran
such a script, and fed on stdin every math verdict was `error`. The slow test runs one notebook-
like script that trains the tiny model for 2 steps, evaluates the run directory and generates,
and checks each result against the files the run wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from scalerl import api
from scalerl.cli import main
from scalerl.config import RunConfig
from scalerl.rollout.heldout import EvalReport

FENCE = "```python\ndef f(x):\n    return 8*x{}9\n```"
TESTS = {"type": "call", "fn_name": "f", "inputs": [[-6], [2]], "outputs": [-57, 7]}
ROWS = [
    {"id": "half", "kind": "math", "completion": "so \\boxed{\\frac{1}{2}}", "answer": "0.5"},
    {"id": "third", "kind": "math", "completion": "\\boxed{\\frac{1}{4}}", "answer": "1/3"},
    {"id": "ok", "kind": "code", "completion": FENCE.format("-"), "tests": TESTS},
    {"id": "bad", "kind": "code", "completion": FENCE.format("+"), "tests": TESTS},
    {"id": "t", "task": "arith", "sample_id": "add2-59+70",
     "completion": "<think>9+0=9 5+7=12</think>\\boxed{129}"},
]
"""Math rows whose answers are not integers (so math-verify runs in the verifier's worker
pool), code rows graded in the sandbox, a task row."""
STATUSES = ["correct", "wrong", "correct", "wrong", "correct"]


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `scalerl ARGV` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def without_latency(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "latency_s"}


# --- score ---------------------------------------------------------------------------------------
def test_score_gives_the_verdicts_the_command_writes(tmp_path, capsys):
    verdicts = api.score(ROWS, workers=2)
    assert [v.status for v in verdicts] == STATUSES
    assert all(isinstance(v, api.Verdict) for v in verdicts)
    out = tmp_path / "out.jsonl"
    code, _, _ = cli(["score", write_rows(tmp_path / "in.jsonl", ROWS), "--out", str(out)], capsys)
    assert code == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [without_latency(v.to_row()) for v in verdicts] == [without_latency(r) for r in written]


def test_score_a_malformed_row_raises_the_line_the_command_prints(tmp_path, capsys):
    rows = [ROWS[0], {"id": 2, "kind": "math", "answer": "1"}]
    with pytest.raises(api.CommandError) as caught:
        api.score(rows)
    code, _, err = cli(["score", write_rows(tmp_path / "in.jsonl", rows),
                        "--out", str(tmp_path / "out.jsonl")], capsys)
    assert str(caught.value) == err.strip().splitlines()[-1] == (
        'scalerl score: line 2: "completion" must be a string')
    assert caught.value.exit_code == code == 2


def test_score_skip_bad_leaves_the_malformed_row_out(capsys):
    verdicts = api.score([{"id": 1, "kind": "math"}, ROWS[0]], skip_bad=True)
    assert [v.id for v in verdicts] == ["half"]
    assert 'line 1: "completion" must be a string (skipped)' in capsys.readouterr().err


@pytest.mark.parametrize("settings,line", [
    ({"workers": 0}, "scalerl score: --workers must be >= 1, got 0"),
    ({"tool_format": "xml"}, "scalerl score: error: argument --tool-format: invalid choice: "
                             "'xml' (choose from 'plain', 'chat')"),
    ({"data": {"nope": "x.jsonl"}}, "scalerl score: --data nope: no task 'nope'"),
])
def test_score_bad_settings_raise_the_commands_line(settings, line):
    with pytest.raises(api.CommandError) as caught:
        api.score(ROWS[:1], **settings)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


def test_a_setting_the_command_does_not_have_is_a_type_error():
    with pytest.raises(TypeError, match="`scalerl score` has no setting 'out'"):
        api.score(ROWS[:1], out="x.jsonl")
    with pytest.raises(TypeError, match="`scalerl generate` has no setting 'json'"):
        api.generate("tiny", "arith", json=True)


# --- evaluate ------------------------------------------------------------------------------------
def rollout_rows() -> list[dict]:
    outcomes = {"a": ["correct", "wrong"], "b": ["wrong", "wrong"], "c": ["correct", "correct"]}
    return [{"task": "arith", "sample_id": s, "status": status}
            for s, statuses in outcomes.items() for status in statuses]


def test_evaluate_rollouts_gives_the_report_eval_json_prints(tmp_path, capsys):
    path = write_rows(tmp_path / "rollouts.jsonl", rollout_rows())
    evaluation = api.evaluate(rollouts=path, k=[1, 2])
    report = evaluation.report
    assert isinstance(report, EvalReport)
    assert report.tasks["arith"].pass_at == {1: pytest.approx(0.5), 2: pytest.approx(2 / 3)}
    assert report.tasks["arith"].samples == 3 and report.overall.rollouts == 6
    code, out, _ = cli(["eval", "--rollouts", path, "--k", "1,2", "--json"], capsys)
    assert code == 0 and json.loads(out) == json.loads(json.dumps(dict(evaluation.results)))


@pytest.mark.parametrize("settings,line", [
    ({"model": "tiny", "tasks": "arith", "n": 0}, "scalerl eval: --n, --limit and --chunk must "
                                                  "be >= 1"),
    ({"model": "/nonexistent", "tasks": "arith"}, "scalerl eval: /nonexistent: no such model "
                                                   "directory"),
    ({"model": "tiny", "tasks": "nope"}, "scalerl eval: unknown task 'nope'"),
    ({"model": "tiny", "tasks": "arith", "protocol": "bogus"},
     "scalerl eval: error: argument --protocol: invalid choice: 'bogus'"),
    ({"rollouts": "r.jsonl", "k": "0"}, "scalerl eval: --k '0': expected comma-separated "
                                        "integers >= 1"),
])
def test_evaluate_bad_settings_raise_the_commands_line(settings, line, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(api.CommandError) as caught:
        api.evaluate(out=tmp_path / "out", **settings)
    assert str(caught.value).startswith(line) and caught.value.exit_code == 2
    argv = ["eval", "--out", str(tmp_path / "out")]
    for name, value in settings.items():
        argv += [f"--{name}", str(value)]
    assert cli(argv, capsys)[2].strip().splitlines()[-1] == str(caught.value)


# --- generate and train: what fails before any engine starts -------------------------------------
@pytest.mark.parametrize("settings,line", [
    ({"task": "no-such-task"}, "scalerl generate: unknown task 'no-such-task'"),
    ({"task": "arith", "n": 0}, "scalerl generate: --n and --limit must be > 0"),
    ({"task": "arith", "thinking_budget": "x"}, "scalerl generate: thinking budget 'x': "
                                                "expected A or A:B"),
    ({"task": "arith", "answer_budget": 0}, "scalerl generate: Budget.answer must be > 0"),
])
def test_generate_bad_settings_raise_the_commands_line(settings, line):
    with pytest.raises(api.CommandError) as caught:
        api.generate("tiny", **settings)
    assert str(caught.value).startswith(line) and caught.value.exit_code == 2


@pytest.mark.parametrize("config,overrides,line", [
    (None, {"loss.name": "nope"}, "loss.name = 'nope': allowed: cispo, dapo, grpo, gspo"),
    ("no-such-recipe", (), "config 'no-such-recipe' is neither a file nor a recipe"),
    (RunConfig(), {"steps": -1}, "steps = -1: must be > 0"),
    (None, ["steps"], "--set 'steps': expected KEY=VALUE"),
    (None, {"tasks": [{"name": "nope"}]}, "tasks[0].name: unknown task 'nope'"),
])
def test_train_bad_config_raises_the_commands_line(config, overrides, line, tmp_path):
    with pytest.raises(api.CommandError) as caught:
        api.train(config, overrides, run_dir=tmp_path / "run")
    assert str(caught.value).startswith(line) and caught.value.exit_code == 2
    assert not (tmp_path / "run").exists()


OVERRIDES = {"steps": 7, "loss.name": "grpo", "tasks": [{"name": "arith", "weight": 2.0}],
             "policy.model": "/nonexistent/model"}
"""Settings whose run stops at its model (after config.yaml is written), before any engine."""


@pytest.mark.parametrize("config,overrides", [
    (None, OVERRIDES),
    (None, [f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items()]),
    (RunConfig(), OVERRIDES),
], ids=["recipe-dict", "recipe-list", "runconfig"])
def test_train_writes_the_config_the_command_resolves(config, overrides, tmp_path, capsys):
    import yaml

    with pytest.raises(api.CommandError) as caught:
        api.train(config, overrides, run_dir=tmp_path / "run")
    assert caught.value.exit_code == 2 and str(caught.value).startswith(
        "scalerl train: model '/nonexistent/model': no config.json there")
    sets = [a for k, v in OVERRIDES.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    base = ["--config", str(tmp_path / "default.yaml")] if config is not None else []
    if config is not None:
        (tmp_path / "default.yaml").write_text(yaml.safe_dump({}))
    code, out, _ = cli(["train", *base, *sets, "--print-config"], capsys)
    assert code == 0
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()) == yaml.safe_load(out)


def test_train_resume_without_a_run_dir_raises_the_commands_line():
    with pytest.raises(api.CommandError, match="^--resume needs --run-dir"):
        api.train(overrides={"steps": 7}, resume=True)


# --- scripts as a user writes them ---------------------------------------------------------------
NOTEBOOK = f"""
import json, sys
print("script ran", flush=True)
from scalerl import api
verdicts = api.score({ROWS!r}, workers=2)
print(json.dumps([[v.id, v.status, v.detail] for v in verdicts]), flush=True)
"""
"""A notebook-like script: no `if __name__ == "__main__":` guard."""


def run_script(tmp_path, fed_on_stdin: bool) -> subprocess.CompletedProcess:
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    argv, stdin = ([sys.executable, "-"], NOTEBOOK) if fed_on_stdin else (
        [sys.executable, str(script)], None)
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


@pytest.mark.parametrize("fed_on_stdin", [False, True], ids=["file", "stdin"])
def test_a_script_without_a_main_guard_gets_real_verdicts(tmp_path, fed_on_stdin):
    proc = run_script(tmp_path, fed_on_stdin)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines.count("script ran") == 1, proc.stdout  # no worker ran the script again
    verdicts = json.loads(lines[-1])
    assert [status for _, status, _ in verdicts] == STATUSES, verdicts
    assert "exact rational" in verdicts[0][2]  # decided by math-verify in a pool worker
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


# --- the engine: train, evaluate the run, generate (one script, one process) ---------------------
ENGINE_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    print("script ran", flush=True)
    from scalerl import api
    model, tmp = sys.argv[1], Path(sys.argv[2])
    facts = {}
    run = api.train("tiny-cpu", {
        "steps": 2, "offpolicy.mode": "ppo", "offpolicy.prompts_per_step": 4,
        "offpolicy.rollouts_per_prompt": 2, "val.every": 0, "log.progress": False,
        "log.trackers": [], "policy.model": model,
        "tasks": [{"name": "arith", "budget": {"thinking": 48, "answer": 16}}]},
        run_dir=tmp / "run")
    facts["train"] = {"type": type(run).__name__, "steps": run.steps, "run_dir": str(run.run_dir),
                      "summary": dict(run.summary), "config_steps": run.config.steps}
    ev = api.evaluate(run.run_dir, n=2, k=[1, 2], limit=4, out=tmp / "eval")
    facts["evaluate"] = {
        "type": type(ev).__name__, "steps": [m.step for m in ev.models],
        "report_type": type(ev.report).__name__,
        "arith": [ev.report.tasks["arith"].samples, ev.report.tasks["arith"].rollouts,
                  ev.report.tasks["arith"].pass_at[1], ev.report.tasks["arith"].mean_at_n],
        "generated": [m.generated_samples for m in ev.models],
        "results": json.loads(json.dumps(dict(ev.results)))}
    gen = api.generate(model, "arith", n=2, limit=3, thinking_budget="8", answer_budget=16,
                       max_model_len=512, kv_cache_gib=0.5, out=tmp / "rollouts.jsonl")
    facts["generate"] = {
        "type": type(gen).__name__, "rows": [json.loads(json.dumps(r.to_row()))
                                             for r in gen.rollouts],
        "pass_rate": gen.summary["pass_rate"], "rollouts": gen.summary["rollouts"]}
    print(json.dumps(facts), flush=True)
""")


@pytest.fixture(scope="module")
def engine_facts(tiny_model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    proc = subprocess.run([sys.executable, "-", tiny_model_path, str(tmp)], input=ENGINE_SCRIPT,
                          capture_output=True, text=True, timeout=1500, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines.count("script ran") == 1, proc.stdout[-2000:]
    return tmp, json.loads(lines[-1])


@pytest.mark.slow
def test_train_returns_what_the_runs_summary_json_holds(engine_facts):
    tmp, facts = engine_facts
    train = facts["train"]
    assert train["type"] == "TrainResult" and train["steps"] == train["config_steps"] == 2
    assert train["summary"] == json.loads((tmp / "run" / "summary.json").read_text())
    assert (tmp / "run" / "checkpoints" / "step-000002").is_dir()


@pytest.mark.slow
def test_evaluate_a_run_dir_returns_the_typed_report_of_results_json(engine_facts):
    tmp, facts = engine_facts
    ev = facts["evaluate"]
    assert ev["type"] == "Evaluation" and ev["report_type"] == "EvalReport"
    assert ev["steps"] == [2] and ev["generated"] == [4]
    samples, rollouts, pass1, mean = ev["arith"]
    assert (samples, rollouts) == (4, 8) and pass1 == pytest.approx(mean)
    assert ev["results"] == json.loads((tmp / "eval" / "results.json").read_text())
    assert ev["results"]["models"][0]["tasks"]["arith"]["pass@1"] == pytest.approx(pass1)


@pytest.mark.slow
def test_generate_returns_the_rollouts_it_wrote(engine_facts):
    tmp, facts = engine_facts
    gen = facts["generate"]
    written = [json.loads(line) for line in (tmp / "rollouts.jsonl").read_text().splitlines()]
    assert gen["type"] == "Generation" and gen["rollouts"] == 6 == len(gen["rows"])
    assert gen["rows"] == written
    correct = sum(r["status"] == "correct" for r in written)
    assert gen["pass_rate"] == pytest.approx(correct / 6)
    assert {r["status"] for r in written} <= {"correct", "wrong", "no_answer"}
