"""The layering rule and the no-cycle rule, checked on the source.

The rule: the four parts are floors, `sandbox` < `envs` < `rollout` < `trainer`, and the glue
(`scalerl/`: the command line, config, reports) sits on top. A module may import its own part,
the parts below it, and third-party code; never a part above it, and no part may import the glue.
Every import that runs counts, wherever it is written: at the top of a module, inside a function
(a lazy import is still a dependency) or as `importlib.import_module("scalerl...")`; for the
floors, imports under `if TYPE_CHECKING:` (never executed) are left out. Separately, no two
scalerl modules may import each other, directly or through others, type-only imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"sandbox": 0, "envs": 1, "rollout": 2, "trainer": 3}
"""Part -> floor; the glue is above every floor."""
GLUE = 4


def module_files() -> dict[str, Path]:
    """scalerl module name -> file, for the four parts and the glue package."""
    out: dict[str, Path] = {}
    for folder, package in [(ROOT / p, f"scalerl.{p}") for p in FLOORS] + [
            (ROOT / "scalerl", "scalerl")]:
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = module_files()


def floor_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in FLOORS:
        return FLOORS[parts[1]]
    return GLUE


def _resolve(name: str, imported: str | None = None) -> str | None:
    """The scalerl module an import statement depends on (a submodule when `from P import sub`
    names one), or None for third-party and standard-library imports."""
    if not name.startswith("scalerl"):
        return None
    if imported and f"{name}.{imported}" in MODULES:
        return f"{name}.{imported}"
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _runtime_nodes(tree: ast.AST, type_only: bool = False):
    """Every node of `tree` except those under `if TYPE_CHECKING:` (kept with `type_only`)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = getattr(child, "test", None) if isinstance(child, ast.If) else None
            if not type_only and test is not None and "TYPE_CHECKING" in ast.unparse(test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def imports_of(module: str, type_only: bool = False) -> set[str]:
    """Every scalerl module `module` imports, top-level, inside functions, or by importlib
    (and under `if TYPE_CHECKING:` with `type_only`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in _runtime_nodes(tree, type_only):
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {_resolve(base, a.name) for a in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.add(_resolve(node.args[0].value))
    return {m for m in found if m is not None and m != module}


GRAPH = {m: imports_of(m) for m in MODULES}
TYPED_GRAPH = {m: imports_of(m, type_only=True) for m in MODULES}
"""Imports with those under `if TYPE_CHECKING:` counted: a circle of types is still a circle."""


def test_no_part_imports_a_part_above_it_or_the_glue():
    upward = sorted(f"{m} imports {dep}" for m, deps in GRAPH.items() for dep in deps
                    if floor_of(dep) > floor_of(m))
    assert upward == [], "layering broken (sandbox < envs < rollout < trainer < glue):\n" + \
        "\n".join(upward)


FORBIDDEN = {("rollout", "sandbox")}
"""(part, part below it) pairs that must not meet even though the floors allow it: the generator
gets tool sessions through the run's EnvContext (envs/context.py), never from the sandbox."""


def test_the_generator_never_reaches_the_sandbox_itself():
    found = sorted(f"{m} imports {dep}" for m, deps in GRAPH.items() for dep in deps
                   if (m.split(".")[1:2] + dep.split(".")[1:2]) in map(list, FORBIDDEN))
    assert found == [], "\n".join(found)


def test_the_rule_is_checked_on_every_part():
    for part in FLOORS:
        assert any(floor_of(m) == FLOORS[part] for m in MODULES), part
    assert "scalerl.cli" in MODULES and floor_of("scalerl.cli") == GLUE


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_cycles_even_through_lazy_or_type_only_imports():
    cycles = _cycles(TYPED_GRAPH)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_type_checking_imports_are_left_out_and_lazy_ones_kept():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                     "def f():\n    import b\n")
    names = {n.names[0].name for n in _runtime_nodes(tree) if isinstance(n, ast.Import)}
    assert names == {"b"}
    typed = {n.names[0].name for n in _runtime_nodes(tree, type_only=True)
             if isinstance(n, ast.Import)}
    assert typed == {"a", "b"}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


CATALOGUES = ("scalerl.envs.catalog", "scalerl.envs.registry")
"""Where tasks are looked up by name. Only the glue may: it builds the run's Task objects once and
hands them down (the scorer, the trainer's tasks, held-out evaluation)."""


def test_nothing_under_rollout_or_trainer_looks_a_task_up_by_name():
    lookups = sorted(f"{m} imports {dep}" for m, deps in TYPED_GRAPH.items() for dep in deps
                     if floor_of(m) in (FLOORS["rollout"], FLOORS["trainer"])
                     and dep in CATALOGUES)
    assert lookups == [], "task lookups by name below the glue:\n" + "\n".join(lookups)


def test_the_lookup_rule_would_see_a_lazy_lookup():
    tree = ast.parse("def f(name):\n    from scalerl.envs.catalog import get_task\n"
                     "    return get_task(name)\n")
    found = {n.module for n in _runtime_nodes(tree) if isinstance(n, ast.ImportFrom)}
    assert found & set(CATALOGUES) == {"scalerl.envs.catalog"}


RAY_HOME = "scalerl.envs.ray_grading"
"""The one module that may import Ray (an optional dependency: `pip install 'scalerl[ray]'`)."""


def third_party_roots(module: str) -> set[str]:
    """The top-level names of every non-scalerl module `module` imports, wherever written."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"scalerl"}


def test_only_the_ray_grading_module_imports_ray():
    assert "ray" in third_party_roots(RAY_HOME)
    found = sorted(m for m in MODULES if m != RAY_HOME and "ray" in third_party_roots(m))
    assert found == [], f"Ray imported outside {RAY_HOME}: {found}"
