"""`scalerl eval`: held-out pass@k / mean@n of checkpoints, or of existing scored rollouts.

`--rollouts FILE` aggregates rows (`scalerl generate` output) without a model; `--model PATH...`
generates through the vLLM engine with a per-sample cache in `--out DIR/cache` and writes
results.json, results.md and (for several checkpoints) results.png, and with `--log-with` sends
them to experiment trackers (scalerl/evaluation/tracking.py). The sampling settings come from
`--protocol` (scalerl/evaluation/protocols.py: r1, lcb, greedy, default, or the run's own, the
default for a run dir), flags overriding it, and so does the prompt (a protocol's prompt style,
scalerl/evaluation/prompts.py); the benchmarks' problems are checked against the
training tasks (the run's, or `--train-tasks`) for contamination
(scalerl/evaluation/contamination.py). The estimators are
`scalerl.rollout.heldout`'s (shared with the trainer's validation); the files are
`scalerl.evaluation.report`'s. `evaluate(args)` does the work (what `run` and
`scalerl.api.evaluate` call); `run` parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scalerl.commands import CommandError
from scalerl.commands.engine_args import (
    EngineStartError,
    add_budget_args,
    add_engine_args,
    add_grading_args,
    add_tool_args,
    engine_config,
    grading,
    override_budget,
    served_model,
    start_generator,
    with_tool_args,
)
from scalerl.envs.grading import Grading
from scalerl.evaluation.protocols import protocol_names
from scalerl.local_data import add_task_args
from scalerl.rollout.engine_config import EngineConfig

HELP = "evaluate checkpoints on held-out sets (unbiased pass@k, mean@n), or aggregate rollouts"


@dataclass(frozen=True)
class Plan:
    """What a --model evaluation runs: settings, checkpoints, and how to start the engine."""

    settings: Any
    models: list
    engine: EngineConfig
    fp32_head: bool
    tasks: dict
    """The Task objects evaluated, by name (what the generator's scorer renders and scores)."""
    grading: Grading
    """How they are graded: the run's sandbox and verifier settings, else this machine's."""
    train_tasks: dict = field(default_factory=dict)
    """The training tasks the benchmarks are checked against (the run's, or --train-tasks)."""
    train_skipped: tuple = ()
    """Training tasks whose data cannot be had here (one line each): not checked against."""
    project: str = "scalerl"
    """The experiment trackers' project (`--log-with`): the run's `log.project`, else scalerl."""
    run_name: str = "eval"
    """The tracked evaluation's name: `<run dir name>-eval`, else `--out`'s folder name."""


def configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--rollouts", metavar="FILE",
                     help="aggregate scored rollouts (JSONL rows with task, sample_id, status)")
    src.add_argument("--model", nargs="+", metavar="PATH",
                     help="model dirs, run dirs (their checkpoints/step-N) or checkpoints/ dirs; "
                     "a run dir also gives the defaults: its tasks, per-task budgets, "
                     "temperature and engine settings (config.yaml); with --server, default: "
                     "what the server serves")
    parser.add_argument("--k", metavar="K[,K...]",
                        help="pass@k values (default: the protocol's; 1,4,8 for --rollouts); k "
                        "above a sample's rollouts: null")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--log-with", metavar="A,B",
                        help="with --model: also send the results to these experiment trackers "
                             "(Accelerate's: wandb, trackio, mlflow, tensorboard, ...), one "
                             "step per checkpoint (docs/tracking.md)")
    g = parser.add_argument_group("with --model")
    g.add_argument("--tasks", metavar="A,B",
                   help="registered task names (scalerl tasks list); default: the run's")
    g.add_argument("--protocol", choices=protocol_names(),
                   help="sampling settings and prompt the field reports with: r1 (DeepSeek-R1's "
                   "prompt, T 0.6, top-p 0.95, n 64), lcb (LiveCodeBench's prompt, T 0.2, top-p "
                   "0.95, n 10, 2,000 tokens), greedy (n 1, T 0), default (n 8, T 1), run (the "
                   "run's own; the default for a run dir, else default)")
    g.add_argument("--split", default="test", help="held-out split (default test)")
    g.add_argument("--n", type=int, help="rollouts per sample, every task (default: the "
                   "protocol's)")
    g.add_argument("--temperature", type=float,
                   help="sampling temperature (default: the protocol's)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (default: the protocol's)")
    g.add_argument("--train-tasks", metavar="A,B",
                   help="training tasks to check the benchmarks against for contamination "
                   "(default: a run dir's tasks)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (per rollout: seed, "
                                                       "sample id, group)")
    g.add_argument("--limit", type=int, help="N evenly spaced samples of each task's split")
    g.add_argument("--out", metavar="DIR", help="results.json, results.md, results.png, cache/")
    g.add_argument("--chunk", type=int, default=64,
                   help="samples per generation call (the unit saved to the cache)")
    add_task_args(g)
    add_budget_args(parser)
    add_engine_args(parser)
    add_grading_args(parser)
    add_tool_args(parser)


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in text.split(",") if k.strip()}))
    except ValueError:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8"
                         ) from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--k {text!r}: expected comma-separated integers >= 1, e.g. 1,4,8")
    return ks


def print_report(report: dict, ks: tuple[int, ...]) -> None:
    from scalerl.evaluation.report import task_table

    print("\n".join(task_table(report, ks)))
    notes = sorted({n for d in [*report["tasks"].values(), report["overall"]]
                    for n in d.get("notes", [])})
    for n in notes:
        print(f"note: {n}")


def run_dir_of(paths: list[str]) -> Path | None:
    """The training run the first of `paths` belongs to (a run dir, its checkpoints/ folder or
    one checkpoint), or None when it is no run's."""
    path = Path(paths[0]).resolve()
    for run_dir in (path, path.parent, path.parent.parent):
        if (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints").is_dir():
            return run_dir
    return None


def run_config_of(paths: list[str]):
    """The config.yaml of the training run the first of `paths` belongs to, or None."""
    from scalerl.config import config_from_data

    run_dir = run_dir_of(paths)
    if run_dir is None:
        return None
    return config_from_data(yaml.safe_load((run_dir / "config.yaml").read_text()) or {})


def prepare(args, ks: tuple[int, ...] | None = None) -> Plan:
    """Settings, models and engine of a --model run; ValueError before any engine starts."""
    from scalerl.envs.preflight import check_tasks, task_problems
    from scalerl.evaluation.prompts import prompted_tasks
    from scalerl.evaluation.report import resolve_models
    from scalerl.local_data import sources_from_args, unused_note

    if any(v is not None and v < 1 for v in (args.n, args.limit, args.chunk)):
        raise ValueError("--n, --limit and --chunk must be >= 1")
    sources = sources_from_args(args)  # --spec first: a run's tasks may come from a spec
    if not args.model:
        if not args.server:
            raise ValueError("give --rollouts FILE, or --model PATH (or --server URL: the "
                             "server says what it serves)")
        args.model = [served_model(args.server)]
    run_cfg = run_config_of(args.model)
    if not args.out or not (args.tasks or run_cfg):
        raise ValueError("--model needs --out DIR, and --tasks A,B unless it is a run dir "
                         "(whose config.yaml names its tasks)")
    names = _names(args.tasks) if args.tasks else tuple(t.name for t in run_cfg.tasks)
    if not names:
        raise ValueError(f"--tasks {args.tasks!r} names no task; e.g. --tasks math500,gsm8k")
    train = _train_mix(args, run_cfg, sources)
    objects = sources.resolve(names)
    note = unused_note("eval", sources, [*names, *train])
    if note:
        print(note, file=sys.stderr)
    for task in objects.values():
        task.check_split(args.split)
    graded = grading(args, run_cfg.grading if run_cfg is not None else None)  # as it trained
    check_tasks(objects.values(), graded)
    problems = {n: task_problems([t], graded) for n, t in train.items()}
    skipped = tuple(line for lines in problems.values() for line in lines)  # not fatal: skipped
    train = {n: t for n, t in train.items() if not problems[n]}
    models = resolve_models(args.model)
    engine = engine_config(args, _model_of(models[0].path), run_cfg.engine if run_cfg else None)
    settings = eval_settings(args, run_cfg, names, ks, engine.max_model_len, engine.tool_format)
    objects = with_tool_args(args, prompted_tasks(objects, settings.prompt))  # as rendered
    fp32_head = args.fp32_head if args.fp32_head is not None else (
        run_cfg.policy.fp32_head if run_cfg else True)
    run_dir = run_dir_of(args.model)
    return Plan(settings, models, engine, fp32_head, objects, graded, train, skipped,
                project=run_cfg.log.project if run_cfg else "scalerl",
                run_name=f"{run_dir.name}-eval" if run_dir else Path(args.out).resolve().name)


def _model_of(path: str) -> str:
    """The model whose context length the engine takes: a LoRA checkpoint's base model."""
    from scalerl.models import resolve_model
    from scalerl.rollout.lora_adapters import checkpoint_adapter

    adapter = checkpoint_adapter(path)
    return resolve_model(adapter[0]) if adapter is not None else path


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _train_mix(args, run_cfg, sources) -> dict:
    """The training tasks to check against: --train-tasks (with --data/--revision), else the
    run's own (with their `data:`/`revision:`), else none."""
    from scalerl.training import run_tasks

    if args.train_tasks:
        return sources.resolve(_names(args.train_tasks))
    return {} if run_cfg is None else run_tasks(run_cfg)


def eval_settings(args, run_cfg, names: tuple[str, ...], ks: tuple[int, ...] | None,
                  max_model_len: int, tool_format: str = "auto"):
    """The protocol's settings for `names`, with the flags given on top; a budget that cannot
    fit the engine's context is cut to fit (and the report says so)."""
    from scalerl.evaluation.protocols import PROTOCOLS, RUN, run_protocol
    from scalerl.evaluation.report import EvalSettings

    name = args.protocol or (RUN if run_cfg is not None else "default")
    if name == RUN and run_cfg is None:
        raise ValueError("--protocol run needs --model to be a run dir (its config.yaml)")
    proto = run_protocol(run_cfg) if name == RUN else PROTOCOLS[name]
    notes: list[str] = []
    budgets = tuple((t, _fit(override_budget(args, proto.budget_of(t)), max_model_len, t, notes))
                    for t in names)
    return EvalSettings(
        tasks=names, split=args.split, n=args.n or proto.n, ks=ks or proto.ks,
        temperature=args.temperature if args.temperature is not None else proto.temperature,
        top_p=args.top_p if args.top_p is not None else proto.top_p, seed=args.seed,
        budget=budgets[0][1], budgets=budgets, limit=args.limit, protocol=name,
        n_by_task=tuple((t, args.n or proto.n_of(t)) for t in names), notes=tuple(notes),
        prompt=proto.prompt, tools=getattr(args, "tools", None),
        max_turns=args.max_turns if getattr(args, "tools", None) else None,
        tool_format=tool_format)


def _fit(budget, max_model_len: int, task: str, notes: list[str]):
    """`budget` with its hard cap cut to leave room for a prompt in `max_model_len` (a quarter
    of the context, at most 4096 tokens), noted; unchanged when it fits."""
    import dataclasses

    room = max_model_len - min(4096, max_model_len // 4)
    cap = budget.hard_cap(0)
    if cap <= room:
        return budget
    notes.append(f"{task}: the protocol's {cap} tokens do not fit max_model_len "
                 f"{max_model_len}; cut to {room} (raise --max-model-len to keep them)")
    if budget.thinking is None:
        return dataclasses.replace(budget, answer=room, total=None)
    return dataclasses.replace(budget, total=room)


def contamination_of(plan: Plan) -> dict | None:
    """Each benchmark's problems (its whole evaluated split) against the training tasks' train
    splits; None when no training task is known. A training task whose data cannot be had or
    read here is skipped, with its one line in `skipped`."""
    from scalerl.envs.data import DataError
    from scalerl.evaluation.contamination import report

    skipped, train = list(plan.train_skipped), {}
    for name, task in plan.train_tasks.items():
        try:
            if "train" in task.splits:
                train[name] = task.samples("train")
        except (DataError, ValueError) as exc:
            skipped.append(f"task {name!r}: {exc}")
    if not train:
        return {"train_tasks": [], "skipped": skipped, "benchmarks": {}} if skipped else None
    benchmarks = {n: t.samples(plan.settings.split) for n, t in plan.tasks.items()}
    return {"train_tasks": list(train), "skipped": skipped,
            "benchmarks": report(benchmarks, train)}


@dataclass(frozen=True)
class Evaluated:
    """What one `scalerl eval` computed (printed by `run`, returned by `scalerl.api.evaluate`)."""

    ks: tuple[int, ...]
    results: dict
    """results.json's content (--model), or the aggregated report's dict (--rollouts)."""
    reports: tuple = ()
    """(ModelRef, EvalReport) per model evaluated, in order (--rollouts: the file's, one)."""
    plan: Plan | None = None
    """The --model evaluation's settings, tasks and engine (None for --rollouts)."""
    contamination: dict | None = None
    data: dict = field(default_factory=dict)


def evaluate(args: argparse.Namespace) -> Evaluated:
    """The evaluation `args` asks for (--rollouts, or --model: generated, written to --out,
    tracked with --log-with); CommandError with the line (and exit status) `run` prints."""
    from scalerl.coerce import ConfigError
    from scalerl.envs.data import DataError
    from scalerl.envs.preflight import PREFLIGHT_EXIT, PreflightError
    from scalerl.envs.registry import UnknownTaskError
    from scalerl.evaluation.report import EvalInputError

    try:
        ks = parse_ks(args.k) if args.k else None
        if args.log_with:
            from scalerl.evaluation.tracking import tracker_names

            tracker_names(args.log_with)  # a bad name fails before anything runs
            if args.rollouts:
                raise ValueError("--log-with goes with --model (checkpoints evaluated here)")
        if args.rollouts:
            return aggregated(args.rollouts, ks or (1, 4, 8))
        plan = prepare(args, ks)
    except PreflightError as exc:
        raise CommandError(exc.lines("eval"), PREFLIGHT_EXIT) from None
    except (EvalInputError, UnknownTaskError, ConfigError, ValueError) as exc:
        raise CommandError(f"scalerl eval: {exc}") from None
    try:
        return evaluate_models(args, plan)
    except DataError as exc:  # a benchmark's rows could not be read (the hub, a bad copy)
        raise CommandError(f"scalerl eval: {exc}") from None


def aggregated(path: str, ks: tuple[int, ...]) -> Evaluated:
    """The figures of the scored rollouts in `path` (no model)."""
    from scalerl.evaluation.report import ModelRef, read_rollout_records
    from scalerl.rollout.heldout import aggregate

    report = aggregate(read_rollout_records(path), ks)
    return Evaluated(ks, report.to_dict(), ((ModelRef(str(path), None, Path(path).name),
                                             report),))


def evaluate_models(args: argparse.Namespace, plan: Plan) -> Evaluated:
    """Generate what the cache lacks, write the report files, send them to the trackers."""
    from scalerl.ending import close_pools
    from scalerl.evaluation.report import run_eval, task_data
    from scalerl.rollout.scorer import Scorer

    log = None if args.verbose else Path(args.out) / "engine.log"
    if log is not None:
        from scalerl.engine_log import tracker_into

        tracker_into(log)

    def make_generator(path: str):
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        return start_generator(path, plan.engine, fp32_head=plan.fp32_head,
                               scorer=Scorer(plan.tasks, plan.grading), log=log)

    reports: list = []
    try:
        found = contamination_of(plan)
        data = task_data(plan.tasks, plan.settings.split)
        results = run_eval(plan.models, plan.settings, args.out, make_generator, chunk=args.chunk,
                           tasks=plan.tasks, contamination=found, data=data,
                           on_report=lambda ref, report: reports.append((ref, report)))
    except EngineStartError as exc:
        close_pools()
        raise CommandError(f"scalerl eval: {exc}") from None
    close_pools()
    if log is not None and log.exists():
        print(f"scalerl eval: the vLLM engine's own output is in {log}", file=sys.stderr)
    if args.log_with:
        track(results, args, plan)
    return Evaluated(plan.settings.ks, results, tuple(reports), plan, found, data)


def print_models(args: argparse.Namespace, done: Evaluated) -> None:
    from scalerl.evaluation.contamination import console_lines
    from scalerl.evaluation.report import data_lines

    s, results = done.plan.settings, done.results
    print(f"protocol {s.protocol} (prompt style {s.prompt}): temperature {s.temperature}, "
          f"top-p {s.top_p}, n " + ", ".join(f"{t} {s.n_for(t)}" for t in s.tasks))
    for e in results["models"]:
        print(f"## {e['label']} ({e['generated_samples']} samples generated, "
              f"{e['cached_samples']} cached)")
        print_report(e, s.ks)
    for line in [*console_lines(done.contamination), *data_lines(done.data)]:
        print(line)
    print(f"wrote {args.out}/results.json, {args.out}/results.md"
          + (f", {args.out}/results.png" if len(results["models"]) > 1 else ""))


def track(results: dict, args, plan: Plan) -> None:
    """The results to the `--log-with` trackers (one warning per tracker that cannot start)."""
    from scalerl.evaluation.tracking import eval_run, log_results, tracker_names
    from scalerl.training import versions

    run = eval_run(args.out, plan.project, plan.run_name)
    log_results(results, tracker_names(args.log_with), run, {"versions": versions()})


def run(args: argparse.Namespace) -> int:
    try:
        done = evaluate(args)
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(done.results))
    elif done.plan is None:
        print_report(done.results, done.ks)
    else:
        print_models(args, done)
    return 0
