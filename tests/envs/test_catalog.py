"""The catalog's lookups and the shape of envs/: no import cycle (imports inside functions count),
a registry that imports only the shapes, a package init that no module inside imports, a harness
that is stdlib only."""

import ast
import sys
from pathlib import Path

import pytest

import scalerl.envs
from scalerl.envs import catalog, kinds, registry
from scalerl.envs.base import Sample
from scalerl.envs.task import Task

ENVS = Path(scalerl.envs.__file__).parent


@pytest.fixture
def isolated(monkeypatch):
    catalog.task_names()
    for table in ("_TASKS", "_INSTANCES", "_PREFIXES"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(kinds, "_KINDS", kinds._KINDS.copy())
    monkeypatch.setattr(catalog, "_ENTRY_POINTS", {})


def make_not_a_task():
    return "not a task"


def test_a_factory_that_makes_no_task_is_one_line_naming_it(isolated):
    registry.add_task("stringy", make_not_a_task)
    with pytest.raises(TypeError) as info:
        catalog.get_task("stringy")
    assert str(info.value) == (f"task 'stringy': factory {__name__}.make_not_a_task made a str, "
                               "not a scalerl Task")


def test_an_entry_point_that_makes_no_task_is_named(isolated):
    registry.add_task("plugged", make_not_a_task)
    catalog._ENTRY_POINTS["plugged"] = "entry point plugged = pkg:make (from pkg-dist)"
    with pytest.raises(TypeError, match=r"^task 'plugged': entry point plugged = pkg:make "
                                        r"\(from pkg-dist\) made a str, not a scalerl Task$"):
        catalog.get_task("plugged")


def test_the_package_exports_the_catalogs_lookups_and_a_task_gets_its_name(isolated):
    assert scalerl.envs.get_task is catalog.get_task and scalerl.envs.get_kind is catalog.get_kind

    @scalerl.envs.register_task("nameless")
    class Nameless(Task):
        kind = "math"

        def build(self, split):
            return [Sample(id="1", task="nameless", prompt="1+1", answer="2")]

    assert scalerl.envs.get_task("nameless").name == "nameless"
    assert "nameless" in scalerl.envs.task_names()


# --- the import graph of envs/ -------------------------------------------------------------------
def module_name(path: Path) -> str:
    rel = path.relative_to(ENVS).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["scalerl.envs", *parts])


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """(imported module, under `if TYPE_CHECKING`) for every import statement, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", "") == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in typing_only) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{node.module}.{a.name}"
                target = sub if sub in ENVS_MODULES else node.module
                out.append((target, id(node) in typing_only))
    return out


ENVS_FILES = sorted(ENVS.rglob("*.py"))
ENVS_MODULES = {module_name(p) for p in ENVS_FILES}
GRAPH = {module_name(p): {m for m, typing in imports_of(p) if not typing and m in ENVS_MODULES}
         for p in ENVS_FILES if p.name != "harness.py"}


def test_no_import_cycle_in_envs_even_through_imports_inside_functions():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(GRAPH.get(mod, ())):
            if dep.startswith(mod + "."):
                continue  # a package importing its own submodules is how packages work
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep] if dep in path else path + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod, [mod])


def test_no_module_inside_envs_imports_the_envs_package_itself():
    offenders = [m for m, deps in GRAPH.items() if m != "scalerl.envs" and "scalerl.envs" in deps]
    assert offenders == []


def test_registry_and_kinds_import_only_the_shapes():
    deps = {m for m, typing in imports_of(ENVS / "registry.py")
            if not typing and m.startswith("scalerl")}
    assert deps == {"scalerl.envs.kinds"}  # and the Task type, for annotations only
    deps = {m for m, _ in imports_of(ENVS / "kinds.py") if m.startswith("scalerl")}
    # shapes: Sample, Score, Grading; and the one registry rule
    assert deps == {"scalerl.envs.base", "scalerl.envs.grading", "scalerl.sandbox.registry"}


@pytest.mark.parametrize("inside", ["harness.py", "codec.py"])
def test_the_sandbox_harness_imports_only_the_standard_library(inside):
    names = {m.split(".")[0] for m, _ in imports_of(ENVS / "code" / inside)}
    assert names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)
