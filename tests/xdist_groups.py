"""pytest-xdist scheduling for this suite: `--dist loadgroup` by the groups the workers compute.

Every test of a module that uses a shared session fixture (the vLLM engine, the pair of servers:
tests/conftest.py SHARED) runs on one worker, in collection order, so each is started once and the
server tests keep their order; every other module is a group of its own (its module fixtures start
once). xdist's own `loadgroup` cannot be used for this: it renames `item._nodeid`, which pytest 9's
`nodeid` no longer reads, so its groups are silently ignored. Here the workers write the groups
they collected to a file the controller's scheduler reads (both workers collect the same tests).
Registered by tests/conftest.py only when xdist is installed; it changes nothing without `-n`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

KEY = "scalerl_groups"
"""The workerinput key that names the groups file."""


def groups(items, shared: tuple[str, ...]) -> dict[str, str]:
    """{nodeid: group}: "vllm-shared" for every test of a module where one test uses a fixture in
    `shared`, else the test's module path."""
    module = {item: item.nodeid.split("::")[0] for item in items}
    on_shared = {module[item] for item in items
                 if set(shared) & set(getattr(item, "fixturenames", ()))}
    return {item.nodeid: "vllm-shared" if module[item] in on_shared else module[item]
            for item in items}


def write_groups(config, items, shared: tuple[str, ...]) -> None:
    """On a worker: write the groups of `items` where the controller reads them."""
    path = getattr(config, "workerinput", {}).get(KEY)
    if path is None:
        return
    tmp = f"{path}.{os.getpid()}"
    Path(tmp).write_text(json.dumps(groups(items, shared)))
    os.replace(tmp, path)


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the workers' groups as the scopes."""

    def __init__(self, config, log, path: Path) -> None:
        super().__init__(config, log)
        self._path = path
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = json.loads(self._path.read_text())
        if nodeid not in self._groups:
            raise RuntimeError(f"no xdist group for {nodeid} in {self._path}")
        return self._groups[nodeid]


class Plugin:
    """The controller's side: a groups file per session, named to each worker."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="scalerl-xdist-")) / "groups.json"

    def pytest_configure_node(self, node) -> None:
        node.workerinput[KEY] = str(self.path)

    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadgroup":
            return None
        return GroupScheduling(config, log, self.path)

    def pytest_unconfigure(self, config) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)
