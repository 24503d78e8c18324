"""The tiny model plays a real OpenEnv server through the CLI: `scalerl generate` on a spec task
with `environment: {openenv: URL}`, and a short `scalerl train` whose server is killed mid-run.

The server is the guessing game of tests/envs/adapters/openenv_game.py (openenv-core's own
server, tests/openenv_servers.py). The tiny model was never taught the game, so what is checked
is the plumbing: the server's observations reach the model as turns, its rewards are the
verdicts, and a server that dies makes `error` verdicts (never trained, counted) while the run
goes on with its other task. (Named apart from tests/envs/adapters/test_openenv.py: pytest's
default import mode needs distinct test module names.) Slow: two runs of the real engine.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e_runs import steps_of
from openenv_servers import GameServer

pytestmark = pytest.mark.slow


def write_spec(folder: Path, url: str) -> Path:
    rows = [{"prompt": f"Guess my number ({i}). ", "answer": str(i % 9 + 1)} for i in range(16)]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = folder / "guess.yaml"
    spec.write_text(f"tasks:\n"
                    f"  - name: guess_openenv\n    kind: math\n    data: rows.jsonl\n"
                    f"    test_fraction: 0.5\n    max_turns: 3\n    max_observation_chars: 200\n"
                    f"    environment: {{openenv: '{url}', observation_field: message,\n"
                    f"                   timeout_s: 30}}\n")
    return spec


def test_generate_plays_the_server_and_its_reward_is_the_verdict(tmp_path, tiny_model_path):
    server = GameServer(tmp_path).wait_ready()
    try:
        out = tmp_path / "rollouts.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "scalerl", "generate", "--model", tiny_model_path,
             "--task", "guess_openenv", "--spec", str(write_spec(tmp_path, server.url)),
             "--n", "4", "--limit", "4", "--thinking-budget", "16", "--answer-budget", "16",
             "--out", str(out)], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 16
        assert {r["status"] for r in rows} <= {"correct", "wrong", "no_answer"}, rows[0]
        stepped = [r for r in rows if r["detail"].startswith("environment reward")]
        assert stepped, [r["detail"] for r in rows]
        said = [t["text"] for r in rows for t in r["turns"] if t["role"] == "user"]
        assert any(w in t for t in said for w in ("higher", "lower", "not a number")), said
        assert server.wait_live(0) == 0  # every session closed
    finally:
        server.stop()


def test_train_goes_on_with_errors_counted_when_the_server_dies(tmp_path, tiny_model_path):
    server = GameServer(tmp_path).wait_ready()
    run_dir = tmp_path / "run"
    settings = ["steps=5", "offpolicy.mode=ppo", "offpolicy.prompts_per_step=4",
                "offpolicy.rollouts_per_prompt=2", "val.every=0", "checkpoint.every=0",
                "filters.zero_variance=false", "filters.max_error_frac=1.0",
                "log.progress=false", "log.trackers=[]", f"policy.model={tiny_model_path}",
                "tasks=[{name: guess_openenv, budget: {thinking: 16, answer: 16}},"
                " {name: arith, budget: {thinking: 48, answer: 16}}]"]
    cmd = [sys.executable, "-m", "scalerl", "train", "--run-dir", str(run_dir),
           "--spec", str(write_spec(tmp_path, server.url)),
           *[a for s in settings for a in ("--set", s)]]
    log = (tmp_path / "train.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 900
        while not steps_so_far(run_dir) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        server.stop()  # SIGKILL, mid-run: the next episodes cannot reach it
        killed_after = max(steps_so_far(run_dir), default=0)
        assert proc.wait(timeout=900) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        proc.kill()
        server.stop()
    steps = steps_of(run_dir)
    assert sorted(steps) == [1, 2, 3, 4, 5], sorted(steps)
    assert killed_after < 5, "the run ended before the server was killed"
    print(f"server killed after step {killed_after}; per step rollout/error_frac "
          f"{[steps[s].get('rollout/error_frac') for s in sorted(steps)]}, "
          f"batch/error_excluded_frac "
          f"{[steps[s].get('batch/error_excluded_frac') for s in sorted(steps)]}")
    before = [steps[s] for s in steps if s <= killed_after]
    after = [steps[s] for s in steps if s > killed_after + 1]  # the next step may have started
    assert all(r.get("rollout/error_frac", 0.0) == 0.0 for r in before), before
    assert after and all(r["rollout/error_frac"] > 0 for r in after), after
    assert all(0 < r["batch/error_excluded_frac"] < 1 for r in after), after  # arith trains


def steps_so_far(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "loss/value" in r or "batch/empty" in r]
