"""The three routes in (decorator, task spec, `scalerl.tasks` entry point), run as the docs
(docs/tasks.md, README.md's tour) write them, and bad names."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.envs import catalog, kinds, registry, spec
from scalerl.envs.base import Sample
from scalerl.envs.catalog import get_kind, get_task
from scalerl.envs.registry import UnknownTaskError, register_task
from scalerl.envs.spec import SpecError, register_spec_file
from scalerl.envs.task import Task

SCALERL = str(Path(sys.executable).with_name("scalerl"))
ROOT = Path(__file__).resolve().parents[2]
TASKS_DOC = ROOT / "docs" / "tasks.md"
"""How to register a task: the page whose examples these tests run."""


def doc_block(first_line: str, doc: Path = TASKS_DOC) -> str:
    """The fenced block of `doc` whose first line is `first_line`, exactly as written."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line == first_line and i > 0 and lines[i - 1].startswith("```"):
            end = lines.index("```", i)
            return "\n".join(lines[i:end]) + "\n"
    raise AssertionError(f"{doc.relative_to(ROOT)} has no fenced block starting with "
                         f"{first_line!r}")


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    """Each test registers into copies of the registry's tables, restored afterwards."""
    catalog.task_names()  # built-ins and plugins loaded before the copy
    for table in ("_TASKS", "_INSTANCES", "_PREFIXES"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    monkeypatch.setattr(spec, "_FROM_SPEC", {})
    monkeypatch.setattr(spec, "_IMPORTED", {})


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- route 1: the decorator --------------------------------------------------------------------
def test_decorator_registers_a_task_class():
    @register_task("echo_test")
    class Echo(Task):
        kind = "math"

        def build(self, split):
            return [Sample(id="1", task=self.name, prompt="say 7", answer="7")]

    task = get_task("echo_test")
    assert isinstance(task, Echo) and task.name == "echo_test"
    assert get_task("echo_test") is task  # built once
    assert task.score(task.samples("test")[0], "\\boxed{7}").correct  # the math kind judged it
    with pytest.raises(ValueError, match="task 'echo_test' has no split 'val'; valid: train, test"):
        task.samples("val")


def test_docs_decorator_example_reaches_the_cli(tmp_path):
    (tmp_path / "my_tasks.py").write_text(doc_block("# my_tasks.py"))
    env = {"SCALERL_TASKS": str(tmp_path / "my_tasks.py")}
    out = _run(["tasks", "list", "--json"], env)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert rows["times3"] == {"name": "times3", "kind": "math", "source": "my_tasks.py",
                              "splits": {"train": 100, "test": 100}}
    out = _run(["tasks", "show", "times3", "-n", "1"], env)
    assert out.returncode == 0 and "What is 1000 * 3?" in out.stdout, out.stderr
    rows_in = "".join(json.dumps({"id": i, "task": "times3", "sample_id": "test-1002",
                                  "completion": c}) + "\n"
                      for i, c in enumerate(["So \\boxed{3006}.", "\\boxed{3005}"]))
    out = _run(["score"], env, input=rows_in)
    statuses = [json.loads(line)["status"] for line in out.stdout.splitlines()]
    assert statuses == ["correct", "wrong"], out.stderr


def test_a_python_task_file_given_where_a_spec_is_read_is_imported(tmp_path):
    (tmp_path / "py_tasks.py").write_text(
        "from scalerl.envs import Sample, Task, register_task\n\n"
        "@register_task('from_py')\nclass FromPy(Task):\n    kind = 'math'\n\n"
        "    def build(self, split):\n"
        "        return [Sample(id='1', task=self.name, prompt='1+1', answer='2')]\n")
    assert register_spec_file(tmp_path / "py_tasks.py") == ["from_py"]
    assert get_task("from_py").samples("test")[0].answer == "2"


def test_a_broken_python_task_file_is_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("import nonexistent_module_xyz\n")
    with pytest.raises(SpecError, match=r"broken\.py: import failed: ModuleNotFoundError: "):
        spec.register_task_file(tmp_path / "broken.py")


def test_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="task 'arith' is already registered"):
        register_task("arith")(lambda: None)


def test_unknown_task_is_one_line_listing_the_known_names():
    with pytest.raises(UnknownTaskError) as info:
        get_task("gsm9k")
    assert str(info.value) == (
        "unknown task 'gsm9k'; known tasks: " + ", ".join(
            catalog.task_names() + [f"{p}:<name>" for p in catalog.prefixes()])
    )
    assert "arith" in str(info.value) and "rg:<name>" in str(info.value)


def test_unknown_kind_lists_the_known_kinds():
    with pytest.raises(UnknownTaskError, match="unknown task kind 'chess'; known kinds: .*math"):
        get_kind("chess")


# --- route 2: a task spec (YAML or JSON) --------------------------------------------------------
def make_spec(tmp_path, fmt="yaml"):
    write_jsonl(tmp_path / "train.jsonl",
                [{"question": f"What is {i} + {i}?", "gold": str(2 * i)} for i in range(30)])
    write_jsonl(tmp_path / "heldout.jsonl", [{"question": "What is 3 + 3?", "gold": "6"}])
    entry = {
        "name": "doubling", "kind": "math", "data": "train.jsonl", "test_data": "heldout.jsonl",
        "fields": {"prompt": "question", "answer": "gold"}, "val_fraction": 0.1,
        "system_prompt": "Put the answer in \\boxed{}.", "options": {"boxed_only": True},
    }
    path = tmp_path / f"tasks.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps([entry]))
    else:
        import yaml

        path.write_text(yaml.safe_dump({"tasks": [entry]}))
    return path


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_spec_file_registers_a_file_task(tmp_path, fmt):
    assert register_spec_file(make_spec(tmp_path, fmt)) == ["doubling"]
    task = get_task("doubling")
    assert task.kind == "math" and task.splits == ("train", "val", "test")
    assert [s.prompt for s in task.samples("test")] == ["What is 3 + 3?"]
    assert len(task.samples("train")) + len(task.samples("val")) == 29  # 3 + 3 held out
    assert task.samples("test")[0].messages(task.system_prompt)[0]["content"] == (
        "Put the answer in \\boxed{}.")
    s = task.samples("test")[0]
    assert task.score(s, "\\boxed{6}").status == "correct"
    assert task.score(s, "6").status == "no_answer"  # options: boxed_only reached the verifier


def test_spec_errors_are_one_line_naming_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nkind: math\ndata: d.jsonl\ntest_frac: 0.2\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: task #1 \(x\): unknown key 'test_frac'; "
                                        r"valid keys: name, kind, data, test_data"):
        register_spec_file(bad)
    bad.write_text("name: x\nkind: chess\ndata: d.jsonl\n")
    with pytest.raises(SpecError, match=r"unknown task kind 'chess'; known kinds: "):
        register_spec_file(bad)
    bad.write_text("name: x\nkind: math\ndata: d.jsonl\ntest_fraction: '10%'\n")
    with pytest.raises(SpecError, match=r"\(x\): 'test_fraction' must be a number, got '10%'"):
        register_spec_file(bad)
    bad.write_text("name: arith\nkind: math\ndata: d.jsonl\n")
    with pytest.raises(SpecError, match="task 'arith' is already registered by another module"):
        register_spec_file(bad)
    with pytest.raises(SpecError, match=r"nope\.yaml: no such task spec file"):
        register_spec_file(tmp_path / "nope.yaml")
    bad.write_text("name: x\nkind: math\ndata: d.jsonl\nmax_bad_fraction: 2\n")
    with pytest.raises(SpecError, match=r"\(x\): max_bad_fraction must be a number in \[0, 1\]"):
        register_spec_file(bad)


def test_a_spec_sets_the_share_of_unusable_rows_it_tolerates(tmp_path):
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20)]
    rows[3]["answer"] = ""  # 1 of 20 = 5%: over the default 1%, under the spec's 10%
    write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "t.yaml").write_text("name: tolerant\nkind: math\ndata: d.jsonl\n"
                                     "max_bad_fraction: 0.1\n")
    register_spec_file(tmp_path / "t.yaml")
    task = get_task("tolerant")
    assert sum(len(task.samples(s)) for s in task.splits) == 19
    assert task.skipped.by_reason() == {"field 'answer' is missing": 1}


def _run(args, env_extra=None, **kw):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([SCALERL, *args], capture_output=True, text=True, env=env,
                          timeout=120, **kw)


def test_spec_files_in_scalerl_tasks_env_var_are_registered(tmp_path):
    path = make_spec(tmp_path)
    out = _run(["tasks", "list", "--json"], {"SCALERL_TASKS": str(path)})
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert rows["doubling"]["kind"] == "math" and rows["doubling"]["splits"]["test"] == 1


def test_docs_spec_example_registers_its_task(tmp_path):
    """docs/tasks.md's full task spec, with data files of the shape it names."""
    (tmp_path / "my_tasks.yaml").write_text(doc_block("# my_tasks.yaml"))
    write_jsonl(tmp_path / "problems.jsonl",
                [{"problem": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(20)])
    write_jsonl(tmp_path / "heldout.jsonl", [{"problem": "What is 40 + 2?", "answer": "42"}])
    assert register_spec_file(tmp_path / "my_tasks.yaml") == ["my_math"]
    task = get_task("my_math")
    assert task.kind == "math" and task.splits == ("train", "test")
    (sample,) = task.samples("test")
    assert sample.prompt == "What is 40 + 2?" and len(task.samples("train")) == 20
    assert task.score(sample, "\\boxed{42}").status == "correct"
    assert task.score(sample, "42").status == "no_answer"  # boxed_only reached the verifier


def test_readme_tour_spec_reaches_the_cli(tmp_path):
    """README.md's five-minute tour registers a task from a spec of three keys."""
    (tmp_path / "first_task.yaml").write_text(doc_block("# first_task.yaml", ROOT / "README.md"))
    write_jsonl(tmp_path / "problems.jsonl",
                [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(40)])
    out = _run(["tasks", "list", "--json", "--spec", str(tmp_path / "first_task.yaml")])
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert rows["my_math"]["kind"] == "math"
    assert sum(rows["my_math"]["splits"].values()) == 40 and rows["my_math"]["splits"]["test"] > 0


def test_missing_data_file_of_a_spec_task_is_reported_on_its_row(tmp_path):
    (tmp_path / "t.yaml").write_text("name: ghost\nkind: math\ndata: gone.jsonl\n")
    out = _run(["tasks", "list", "--spec", str(tmp_path / "t.yaml")])
    assert out.returncode == 1
    assert f"error: {tmp_path / 'gone.jsonl'}: no such file" in out.stdout


# --- route 3: a pip-installed plugin exposing a `scalerl.tasks` entry point ---------------------
@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """docs/tasks.md's plugin, as written there, pip-installed into a folder of its own."""
    src = tmp_path_factory.mktemp("plugin_src")
    (src / "capitals_plugin.py").write_text(doc_block("# capitals_plugin.py"))
    (src / "pyproject.toml").write_text(doc_block("# pyproject.toml of your package"))
    target = tmp_path_factory.mktemp("plugin_site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(src)],
        check=True, capture_output=True, timeout=300,
    )
    assert list(target.glob("capitals_plugin-0.0.1.dist-info/entry_points.txt"))
    return target


def test_entry_point_plugin_task_is_listed_and_scores(plugin_dir):
    env = {"PYTHONPATH": str(plugin_dir)}
    out = _run(["tasks", "list", "--json"], env)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert rows["capitals"] == {"name": "capitals", "kind": "capitals",
                                "splits": {"train": 1, "test": 1}, "source": "plugin"}
    rows_in = "\n".join(json.dumps({"id": i, "task": "capitals", "sample_id": "fr",
                                    "completion": c}) for i, c in enumerate(["paris", "Lyon"]))
    out = _run(["score", "-"], env, input=rows_in)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["status"] for line in out.stdout.splitlines()] == ["correct", "wrong"]


def test_without_the_plugin_the_task_is_unknown():
    out = _run(["tasks", "show", "capitals"])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("scalerl tasks: unknown task 'capitals'; known tasks: aime24, ")


def test_every_registry_refuses_a_taken_name_with_the_same_message():
    """One rule (sandbox/registry.py): kinds, environments, tool formats, adapters, sandbox
    backends, losses, trackers, task prefixes; a spec file re-read replaces its own tasks."""
    from scalerl.envs import kinds
    from scalerl.envs.adapters.base import ADAPTERS
    from scalerl.envs.environment import ENVIRONMENTS
    from scalerl.envs.tool_format import PlainFormat, register_tool_format
    from scalerl.sandbox.base import BACKENDS
    from scalerl.trainer.losses import LOSSES
    from scalerl.trainer.trackers import TRACKERS

    cases = [(lambda: kinds.register_kind(kinds.lookup_kind("math")), "task kind 'math'"),
             (lambda: ENVIRONMENTS.add("python", object), "environment 'python'"),
             (lambda: register_tool_format(PlainFormat()), "tool format 'plain'"),
             (lambda: ADAPTERS.add("class", object), "environment adapter 'class'"),
             (lambda: BACKENDS.add("bwrap", object), "sandbox backend 'bwrap'"),
             (lambda: LOSSES.add("cispo", object), "loss 'cispo'"),
             (lambda: TRACKERS.add("tensorboard", object), "tracker 'tensorboard'"),
             (lambda: registry.register_task_prefix("arith")(lambda rest: None),
              "task prefix 'arith'")]
    for register, what in cases:
        with pytest.raises(ValueError, match=f"^{re.escape(what)} is already registered$"):
            register()
