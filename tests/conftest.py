"""Session-wide fixtures: the tiny model, ONE vLLM engine and ONE pair of vLLM servers shared
by every slow test.

`tiny_model_path` builds (or finds cached) the tiny model; `engine` starts one `EngineGenerator`
on it for the whole session (vLLM start-up is ~20-60 s on 2 cores), scoring with the tasks the
tests generate for (arith and its levels, synth_code). Tests that change the engine's weights must
put the original ones back (see tests/rollout/test_engine.py); its `version` may therefore be
above 0 when a test starts. `vllm_servers` starts two real servers with `scalerl serve
--log-stats` (~70-120 s on 2 cores, ~2.7 GiB each; vLLM's gauges at /metrics on); the tests that
use them run last in the session (so the servers live only meanwhile), the one marked
`kills_server` after all the others, and the servers are stopped, with a check that no process of
theirs is left, when the session ends. All these fixtures are for tests marked `slow`. Under
pytest-xdist (`make test`), `--dist loadgroup` keeps every test on them on one worker
(tests/xdist_groups.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from scalerl.tiny import ensure_tiny

    return str(ensure_tiny(log=lambda msg: None))


@pytest.fixture(scope="session")
def engine_config():
    from scalerl.rollout.engine_config import EngineConfig

    # Memory set explicitly: 1 GiB of KV cache, 10% of host memory, 1024-token sequences.
    return EngineConfig(dtype="float32", kv_cache_gib=1.0, memory_fraction=0.1,
                        max_model_len=1024, seed=0)


@pytest.fixture(scope="session")
def engine(tiny_model_path, engine_config):
    from session_tasks import session_scorer

    from scalerl.rollout.engine import EngineGenerator

    generator = EngineGenerator(tiny_model_path, config=engine_config, scorer=session_scorer())
    yield generator
    generator.close()


@pytest.fixture(scope="session")
def ray_cluster():
    """ONE Ray cluster of two nodes on this machine (two raylets, 1 CPU and an 80 MB object
    store each, no dashboard) for every Ray test; its temp dir (Ray's sessions, logs, spilled
    objects) removed at the end. Tests grade on it with `verifiers.ray_address=cluster.address`;
    the graders they made are closed before it stops."""
    import os
    import shutil
    import tempfile

    from ray.cluster_utils import Cluster  # the ray extra: make install installs it

    from scalerl.envs.grading import close_clusters

    temp = tempfile.mkdtemp(prefix="srl-ray-")  # short: Ray's socket paths are under it
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp
    node = {"num_cpus": 1, "object_store_memory": 80 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    try:
        yield cluster
    finally:
        close_clusters()
        cluster.shutdown()
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(temp, ignore_errors=True)


SHARED = ("engine", "vllm_servers", "ray_cluster")
"""The session fixtures that start vLLM or Ray: under pytest-xdist, one worker runs every test
on them."""


def pytest_configure(config):
    """Under pytest-xdist's controller, schedule by the groups of tests/xdist_groups.py."""
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        from xdist_groups import Plugin

        config.pluginmanager.register(Plugin(), "scalerl-xdist-groups")


def pytest_collection_modifyitems(config, items):
    """Tests on the shared servers run last; the one that kills a server after the others. On a
    pytest-xdist worker, the groups are written for the controller (tests/xdist_groups.py)."""
    def rank(item) -> int:
        if "vllm_servers" not in getattr(item, "fixturenames", ()):
            return 0
        return 2 if item.get_closest_marker("kills_server") else 1
    items.sort(key=rank)  # stable: the order within each rank is kept
    if hasattr(config, "workerinput"):
        from xdist_groups import write_groups

        write_groups(config, items, SHARED)


@pytest.fixture(scope="session")
def vllm_servers(tiny_model_path, tmp_path_factory):
    from serverset import ServerSet

    servers = ServerSet(tiny_model_path, 2, tmp_path_factory.mktemp("servers"), "--log-stats")
    try:
        servers.start_all()
        yield servers
    finally:
        left = servers.stop_all()
        assert not left, f"server processes left after the session: {left}"




