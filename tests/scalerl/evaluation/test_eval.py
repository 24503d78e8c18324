"""`scalerl eval`: --rollouts aggregation, checkpoints, the rollout cache and the report files.

The engine-free parts run fast; one slow test drives the real vLLM engine through the cache.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from scalerl import cli
from scalerl.envs.base import Score
from scalerl.envs.catalog import get_task
from scalerl.evaluation.report import (
    EvalInputError,
    EvalSettings,
    ModelRef,
    RolloutCache,
    model_key,
    resolve_models,
    run_eval,
)
from scalerl.rollout.heldout import aggregate, eval_samples, evaluate
from scalerl.rollout.types import Budget, Rollout


def rollout(task, sample_id, group, status, finish="stop"):
    return Rollout(sample_id=sample_id, task=task, prompt_token_ids=(1,), token_ids=(5, 6, 7),
                   logprobs=(-0.1, -0.2, -0.3), versions=(0, 0, 0), finish_reason=finish,
                   thinking_tokens=2, answer_tokens=1, completion="\\boxed{1}",
                   score=Score(status=status), group=group)


def some_rollouts():
    """t1: a 3/4 correct, b 1/4; t2: a 0/4 (one truncated)."""
    out = [rollout("t1", "a", g, "correct" if g < 3 else "wrong") for g in range(4)]
    out += [rollout("t1", "b", g, "correct" if g == 0 else "no_answer") for g in range(4)]
    out += [rollout("t2", "a", g, "wrong", finish="truncated" if g == 0 else "stop")
            for g in range(4)]
    return out


def write_rows(path, rollouts):
    path.write_text("".join(json.dumps(r.to_row()) + "\n" for r in rollouts))
    return path


def test_rollouts_cli_equals_in_training_aggregation_and_hand_values(tmp_path, capsys):
    rollouts = some_rollouts()
    path = write_rows(tmp_path / "r.jsonl", rollouts)
    assert cli.main(["eval", "--rollouts", str(path), "--k", "1,2,8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == aggregate(rollouts, ks=(1, 2, 8)).to_dict()  # what validation computes
    t1 = out["tasks"]["t1"]
    assert t1["pass@1"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert t1["pass@2"] == pytest.approx((1.0 + 0.5) / 2)  # b: 1 - C(3,2)/C(4,2) = 1/2
    assert t1["mean@4"] == pytest.approx(0.5) and t1["pass@8"] is None
    assert out["tasks"]["t2"]["truncated_frac"] == pytest.approx(0.25)
    assert out["overall"]["pass@1"] == pytest.approx((0.75 + 0.25 + 0) / 3)
    assert "fewest here is 4" in t1["notes"][0]


def test_rollouts_cli_human_table(tmp_path, capsys):
    path = write_rows(tmp_path / "r.jsonl", some_rollouts())
    assert cli.main(["eval", "--rollouts", str(path), "--k", "1"]) == 0
    text = capsys.readouterr().out
    # t1: per-sample 3/4 and 1/4 -> 0.5 ± std([.75, .25]) / sqrt(2) = 0.25
    assert "| t1 | 2 | 4 | 0.500 ± 0.250 |" in text
    # overall [.75, .25, 0]: s.e. 0.382 / sqrt(3) = 0.220; one of 12 rollouts truncated
    assert "| **overall** | 3 | 4 | 0.333 ± 0.220 | 0.083 (1) | 0.000 (0) |" in text


@pytest.mark.parametrize("content, message", [
    ('{"task": "t", "sample_id": "a", "status": "correct"}\n{"task": "t"\n', "line 2: not JSON"),
    ('{"task": "t", "sample_id": "a", "status": "correct"}\n{"task": "t", "sample_id": "a"}\n',
     "line 2: missing field 'status'"),
    ('\n', "no rollouts"),
])
def test_malformed_rollouts_file_is_one_line_error(tmp_path, capsys, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert cli.main(["eval", "--rollouts", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("argv, message", [
    (["--model", "x/y"], "--model needs --out DIR, and --tasks A,B unless it is a run dir"),
    (["--model", "x/y", "--tasks", "no_such_task", "--out", "o"], "unknown task 'no_such_task'"),
    (["--model", "./nowhere", "--tasks", "arith", "--out", "o"], "no such model directory"),
    (["--rollouts", "r.jsonl", "--k", "0,2"], "--k '0,2'"),
    (["--model", "x/y", "--tasks", "arith", "--split", "val", "--out", "o"], "no split 'val'"),
    (["--tasks", "arith", "--out", "o"], "give --rollouts FILE, or --model PATH (or --server"),
    (["--tasks", "arith", "--out", "o", "--server", "http://127.0.0.1:9"],
     "--server http://127.0.0.1:9: GET /v1/models failed"),
])
def test_bad_eval_arguments_fail_before_any_engine(argv, message, capsys):
    assert cli.main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow  # builds the tiny model when it is not cached
def test_tiny_names_the_same_model_in_eval_as_everywhere(tiny_model_path):
    from scalerl.evaluation.report import resolve_models

    [ref] = resolve_models(["tiny"])
    assert (ref.path, ref.label) == (tiny_model_path, "tiny")


def make_checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_run_dir_expands_to_checkpoints_in_step_order(tmp_path):
    for step in (10, 2, 100):
        make_checkpoint(tmp_path / "run" / "checkpoints" / f"step-{step}")
    refs = resolve_models([str(tmp_path / "run")])
    assert [r.step for r in refs] == [2, 10, 100]
    assert refs[0].label == "checkpoints/step-2"
    assert [r.step for r in resolve_models([str(tmp_path / "run" / "checkpoints")])] == [2, 10, 100]
    with pytest.raises(EvalInputError, match="neither a model"):
        resolve_models([str(tmp_path)])


def test_model_key_follows_the_files(tmp_path):
    ckpt = make_checkpoint(tmp_path / "m")
    key = model_key(str(ckpt))
    assert model_key(str(ckpt)) == key
    (ckpt / "model.safetensors").write_bytes(b"12345")
    assert model_key(str(ckpt)) != key


def test_cache_keeps_complete_samples_and_skips_a_torn_line(tmp_path):
    settings = EvalSettings(tasks=("t1",), n=4)
    cache = RolloutCache(tmp_path)
    rows = [r.to_row() for r in some_rollouts() if r.task == "t1"]
    cache.append("m", settings, "t1", rows[:6])  # b has 2 of 4 groups
    path = cache.path("m", settings, "t1")
    with path.open("a") as fh:
        fh.write('{"sample_id": "b", "gro')  # an interrupted write
    assert set(cache.load("m", settings, "t1")) == {"a"}
    cache.append("m", settings, "t1", rows[6:])  # the rest, after the torn line
    assert set(cache.load("m", settings, "t1")) == {"a", "b"}
    other = EvalSettings(tasks=("t1",), n=4, temperature=0.7)
    assert cache.load("m", other, "t1") == {}  # other sampling settings: other entry
    assert other.key("t1") != settings.key("t1")
    assert EvalSettings(tasks=("x",), n=4, limit=3, ks=(1,)).key("t1") == settings.key("t1")


def test_cache_key_covers_every_budget_field_per_task():
    base = EvalSettings(tasks=("a", "b"), n=4, budgets=(("a", Budget(answer=16)),))
    assert base.budget_for("a") == Budget(answer=16) and base.budget_for("b") == Budget()
    assert base.key("a") != base.key("b")
    for change in ({"thinking": 8}, {"answer": 17}, {"total": 40}, {"phrase": "stop. </think>"}):
        other = EvalSettings(tasks=("a",), n=4,
                             budgets=(("a", dataclasses.replace(Budget(answer=16), **change)),))
        assert other.key("a") != base.key("a"), change


def fill_cache(out: Path, model: str, settings: EvalSettings, statuses: list[str]):
    """Cache rows for arith's first samples, as a previous run would have written them."""
    samples = eval_samples(get_task("arith"), settings.split, settings.limit)
    rows = [rollout("arith", s.id, g, statuses[i % len(statuses)]).to_row()
            for i, s in enumerate(samples) for g in range(settings.n)]
    RolloutCache(out / "cache").append(model, settings, "arith", rows)


def refuse_engine(path):
    raise AssertionError(f"an engine was started for {path} although everything is cached")


def test_fully_cached_rerun_starts_no_engine_and_writes_the_report(tmp_path):
    settings = EvalSettings(tasks=("arith",), n=2, ks=(1, 2), limit=3)
    refs = []
    for step, statuses in ((5, ["wrong"]), (10, ["correct", "wrong", "wrong"])):
        ckpt = make_checkpoint(tmp_path / "run" / "checkpoints" / f"step-{step}")
        fill_cache(tmp_path / "out", str(ckpt), settings, statuses)
        refs.append(ModelRef(str(ckpt), step, ckpt.name))
    results = run_eval(refs, settings, tmp_path / "out", refuse_engine)
    first, second = results["models"]
    assert (first["generated_samples"], first["cached_samples"]) == (0, 3)
    assert first["overall"]["pass@1"] == 0.0
    assert second["overall"]["pass@1"] == pytest.approx(1 / 3)
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    assert on_disk["models"][1]["tasks"]["arith"]["pass@2"] == pytest.approx(1 / 3)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Comparison" in md and "| step-10 | 10 | 0.333 | 0.333 |" in md
    assert (tmp_path / "out" / "results.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_interrupted_eval_generates_only_the_missing_samples(tmp_path, tiny_model_path, engine):
    """Real engine: a full run, a rerun (nothing generated), then a cache cut to one sample plus
    a torn line (only the two lost samples are generated again; the kept one is not)."""
    calls = []

    class Counting:  # the session's real engine, counting the samples it is asked for
        def generate(self, samples, **kw):
            calls.append([s.id for s in samples])
            return engine.generate(samples, **kw)

    settings = EvalSettings(tasks=("arith",), n=2, ks=(1, 2), limit=3, seed=3,
                            budget=Budget(thinking=48, answer=16))
    ref = ModelRef(str(tiny_model_path), None, "tiny")
    out = tmp_path / "eval"
    full = run_eval([ref], settings, out, lambda p: Counting(), close=lambda g: None)
    assert sum(map(len, calls)) == 3 and full["models"][0]["generated_samples"] == 3
    # the trainer's validation call on the same samples and seeds gives the same figures
    direct = evaluate(engine, [get_task("arith")], n=2, budget=settings.budget, split="test",
                      ks=(1, 2), temperature=1.0, seed=3, limit=3).to_dict()
    assert {k: full["models"][0][k] for k in ("tasks", "overall")} == direct
    calls.clear()
    again = run_eval([ref], settings, out, lambda p: Counting(), close=lambda g: None)
    assert calls == [] and again["models"][0]["cached_samples"] == 3
    path = RolloutCache(out / "cache").path(str(tiny_model_path), settings, "arith")
    lines = path.read_text().splitlines()
    kept = [ln for ln in lines if json.loads(ln)["sample_id"] == json.loads(lines[0])["sample_id"]]
    path.write_text("\n".join(kept) + "\n" + lines[-1][:20])
    resumed = run_eval([ref], settings, out, lambda p: Counting(), close=lambda g: None)
    kept_id = json.loads(kept[0])["sample_id"]
    assert len(calls) == 1 and sorted(calls[0]) == sorted(
        s.id for s in eval_samples(get_task("arith"), "test", 3) if s.id != kept_id)
    assert (resumed["models"][0]["overall"]["samples"], resumed["models"][0]["overall"]["rollouts"]
            ) == (3, 6)
    assert path.read_text().splitlines()[:2] == kept


def test_limited_eval_samples_are_evenly_spaced_over_every_arith_level():
    task = get_task("arith")
    every = list(task.samples("test"))
    picked = eval_samples(task, "test", 60)
    assert len(picked) == 60 == len({s.id for s in picked})
    assert [s.id for s in picked] == [every[i * len(every) // 60].id for i in range(60)]
    levels = {s.meta["level"] for s in every}
    assert {s.meta["level"] for s in picked} == levels  # a prefix would hold add2 only
    assert eval_samples(task, "test", None) == every == eval_samples(task, "test", 10**6)


def test_a_run_dir_gives_its_tasks_budgets_temperature_and_engine(tmp_path):
    import yaml

    from scalerl.cli import build_parser
    from scalerl.commands.eval import prepare
    from scalerl.config import load_config, to_dict

    cfg = load_config("tiny-cpu", ["val.temperature=0.7", "engine.max_model_len=384",
                                   "policy.fp32_head=false"])
    run = tmp_path / "run"
    make_checkpoint(run / "checkpoints" / "step-000020")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    parse = build_parser("eval").parse_args
    plan = prepare(parse(["eval", "--model", str(run), "--out", str(tmp_path / "o")]), (1,))
    assert plan.settings.tasks == ("arith", "synth_code")
    assert plan.settings.budget_for("arith") == Budget(thinking=48, answer=16)
    assert plan.settings.budget_for("synth_code") == Budget(thinking=96, answer=96)
    assert plan.settings.temperature == 0.7 and plan.fp32_head is False
    assert plan.engine.max_model_len == 384 and plan.engine == cfg.engine
    flags = parse(["eval", "--model", str(run / "checkpoints" / "step-000020"), "--out", "o",
                   "--tasks", "arith", "--answer-budget", "8", "--temperature", "1.0",
                   "--max-model-len", "256"])
    plan = prepare(flags, (1,))
    assert plan.settings.tasks == ("arith",) and plan.settings.temperature == 1.0
    assert plan.settings.budget_for("arith") == Budget(thinking=48, answer=8)
    assert plan.engine.max_model_len == 256
