"""What scalerl knows of each of Accelerate's experiment trackers: how one is started and resumed,
whether it takes tables, the package behind it and the fix when it cannot start.

`TRACKERS` holds one `TrackerKind` per name of `accelerate.tracking.LOGGER_TYPE_TO_CLASS`
(tensorboard, wandb, trackio, mlflow, comet_ml, aim, clearml, dvclive, swanlab): the tracker
itself is always Accelerate's class; a kind only says which arguments it is built with, what
to save in the run directory to reopen the same run on `--resume` (W&B's run id, trackio's run
name, MLflow's run id) and how a table is wrapped for it. `probe(name)` says whether a tracker
is installed and usable here without importing it (`scalerl doctor`). Starting, logging and the
run directory's record are trainer/tracking.py's; nothing here imports a tracker at import time.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from scalerl.sandbox.registry import Registry


@dataclass(frozen=True)
class TrackedRun:
    """What every tracker of one run is started with (plain values: log.* and the run dir)."""

    project: str
    """Tracker project (W&B/trackio project, MLflow experiment, Comet/SwanLab project)."""
    run_name: str
    """The run's name in the trackers."""
    tags: tuple[str, ...]
    """Tags of the run (W&B tags, MLflow tags; the others have none)."""
    run_dir: Path
    """Where the run's files are: TensorBoard's `tb/`, W&B's `wandb/`, and the tracker record."""

    def __post_init__(self) -> None:
        bad = [f"{name} = {getattr(self, name)!r}: must not be empty"
               for name in ("project", "run_name") if not str(getattr(self, name)).strip()]
        if bad:
            raise ValueError("; ".join(bad))


Kwargs = Callable[[TrackedRun, dict[str, Any] | None], tuple[tuple, dict[str, Any]]]
"""(run, saved ids or None for a new tracked run) -> (args, kwargs) of the Accelerate class."""


@dataclass(frozen=True)
class TrackerKind:
    """How scalerl starts, resumes and feeds one Accelerate tracker."""

    package: str
    """The module the tracker imports (whether it is installed is `find_spec(package)`)."""
    install: str
    """The command that installs it."""
    arguments: Kwargs
    """The Accelerate class's arguments for a new run, or to reopen the saved one."""
    saved: Callable[[Any], dict[str, Any]] = lambda tracker: {}
    """What to keep in the run directory to reopen this tracked run (empty: no resume; a
    `--resume` starts a new tracked run, or, for TensorBoard, appends to tb/)."""
    table: Callable[[list[str], list[list[Any]]], Any] | None = None
    """(columns, rows) -> the value `log` takes as a table; None: the tracker takes no tables
    (the samples still go to samples/step_NNNNNN.jsonl)."""
    log_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra arguments of every `log` call."""
    redescribe: bool = True
    """Record the run's description again when a `--resume` changed it (MLflow: no, its
    params cannot change)."""
    fix: str = ""
    """What to do when it cannot start (besides installing it)."""
    usable: Callable[[], tuple[bool, str]] = lambda: (True, "installed")
    """Installed here: (usable, detail) without starting it (`scalerl doctor`)."""


TRACKERS: Registry[TrackerKind] = Registry("tracker")
"""Accelerate's tracker names -> how scalerl drives each (tests check they are Accelerate's)."""


def plain(run: TrackedRun, saved: dict[str, Any] | None) -> tuple[tuple, dict[str, Any]]:
    """The project as the run name, as `Accelerator.init_trackers` builds them."""
    return (run.project,), {}


def with_dir(run: TrackedRun, saved: dict[str, Any] | None) -> tuple[tuple, dict[str, Any]]:
    """Trackers that need a logging directory: the run directory."""
    return (run.project, str(run.run_dir)), {}


def tensorboard(run: TrackedRun, saved: dict[str, Any] | None) -> tuple[tuple, dict[str, Any]]:
    return ("tb", str(run.run_dir)), {}  # -> <run-dir>/tb, where the hand-made writer wrote


def wandb_arguments(run: TrackedRun, saved: dict[str, Any] | None
                    ) -> tuple[tuple, dict[str, Any]]:
    kwargs: dict[str, Any] = {"name": run.run_name, "tags": list(run.tags) or None,
                              "dir": str(run.run_dir)}
    if saved:  # the same run: offline, a new offline-run-*-<id>/ that `wandb sync` joins to it
        kwargs |= {"id": saved["id"], "resume": "must"}
    return (run.project,), kwargs


def wandb_table(columns: list[str], rows: list[list[Any]]) -> Any:
    import wandb

    return wandb.Table(columns=columns, data=rows)


def wandb_usable() -> tuple[bool, str]:
    mode = os.environ.get("WANDB_MODE", "online").lower()
    if mode in ("offline", "dryrun"):
        return True, "offline: <run-dir>/wandb, `wandb sync` uploads"
    if mode == "disabled":
        return False, "WANDB_MODE=disabled: W&B logs nothing"
    if os.environ.get("WANDB_API_KEY"):
        return True, "online: WANDB_API_KEY"
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return True, f"online: netrc key for {host}"
    except (OSError, netrc.NetrcParseError):
        pass
    return False, f"no W&B API key (WANDB_API_KEY, or netrc for {host})"


def trackio_arguments(run: TrackedRun, saved: dict[str, Any] | None
                      ) -> tuple[tuple, dict[str, Any]]:
    if saved:
        return (run.project,), {"name": saved["name"], "resume": "must", "embed": False}
    return (run.project,), {"name": unique_trackio_name(run.project, run.run_name),
                            "resume": "never", "embed": False}


def unique_trackio_name(project: str, name: str) -> str:
    """trackio resumes a run by its name: a new run gets one no other run of the project has
    (`name`, else `name-2`, ...)."""
    import trackio

    try:
        taken = {r.name for r in trackio.Api().runs(project)}
    except Exception:  # no such project yet (or an unreadable store: trackio.init will say)
        return name
    return next(n for n in [name, *(f"{name}-{i}" for i in range(2, len(taken) + 3))]
                if n not in taken)


def trackio_table(columns: list[str], rows: list[list[Any]]) -> Any:
    import trackio

    return trackio.Table(columns=columns, data=rows)


def trackio_dir() -> str:
    if os.environ.get("TRACKIO_DIR"):
        return os.environ["TRACKIO_DIR"]
    home = os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache",
                                                   "huggingface"))
    return os.path.join(home, "trackio")


def trackio_usable() -> tuple[bool, str]:
    remote = os.environ.get("TRACKIO_SPACE_ID") or os.environ.get("TRACKIO_SERVER_URL")
    if remote:
        return True, f"remote: {remote} (TRACKIO_SPACE_ID/TRACKIO_SERVER_URL)"
    return True, f"local: {trackio_dir()}, `trackio show`"


def mlflow_arguments(run: TrackedRun, saved: dict[str, Any] | None
                     ) -> tuple[tuple, dict[str, Any]]:
    kwargs: dict[str, Any] = {"experiment_name": run.project, "run_name": run.run_name,
                              "tags": {t: "true" for t in run.tags} or None}
    if saved:
        kwargs["run_id"] = saved["run_id"]
    return (), kwargs


def mlflow_usable() -> tuple[bool, str]:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    return True, f"MLFLOW_TRACKING_URI {uri}" if uri else "MLflow's default store"


TRACKERS.add("tensorboard", TrackerKind(
    "tensorboard", "pip install tensorboard", tensorboard,
    usable=lambda: (True, "<run-dir>/tb")))
TRACKERS.add("wandb", TrackerKind(
    "wandb", "pip install 'scalerl[wandb]'", wandb_arguments,
    saved=lambda tracker: {"id": tracker.run.id}, table=wandb_table,
    log_kwargs={"commit": True},  # a step is whole when sent: nothing held for a later one
    fix="`wandb login` (or WANDB_API_KEY), or log without an account: WANDB_MODE=offline, "
        "then `wandb sync <run-dir>/wandb/offline-run-*`", usable=wandb_usable))
TRACKERS.add("trackio", TrackerKind(
    "trackio", "pip install 'scalerl[trackio]'", trackio_arguments,
    saved=lambda tracker: {"name": tracker.run.name}, table=trackio_table,
    fix="unset TRACKIO_SPACE_ID and TRACKIO_SERVER_URL to log to the local store "
        "(TRACKIO_DIR)", usable=trackio_usable))
TRACKERS.add("mlflow", TrackerKind(
    "mlflow", "pip install 'scalerl[mlflow]'", mlflow_arguments,
    saved=lambda tracker: {"run_id": tracker.active_run.info.run_id}, redescribe=False,
    fix="set MLFLOW_TRACKING_URI to a store this machine can reach (default: sqlite "
        "mlflow.db in the working directory; a server: http://host:5000)",
    usable=mlflow_usable))
TRACKERS.add("comet_ml", TrackerKind("comet_ml", "pip install comet_ml", plain,
                                     fix="set COMET_API_KEY, or COMET_MODE=offline"))
TRACKERS.add("aim", TrackerKind("aim", "pip install aim", with_dir))
TRACKERS.add("clearml", TrackerKind("clearml", "pip install clearml", plain,
                                    fix="`clearml-init` (its server credentials)"))
TRACKERS.add("dvclive", TrackerKind("dvclive", "pip install dvclive", plain))
TRACKERS.add("swanlab", TrackerKind("swanlab", "pip install swanlab", plain,
                                    fix="`swanlab login`, or SWANLAB_MODE=local"))


def installed(name: str) -> bool:
    """Whether tracker `name`'s package can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(TRACKERS[name].package) is not None
    except (ImportError, ValueError):
        return False


def probe(name: str) -> tuple[str, str]:
    """(`ok` | `warn` | `absent`, detail) of tracker `name` on this machine, starting nothing."""
    kind = TRACKERS[name]
    if not installed(name):
        return "absent", f"not installed ({kind.install})"
    usable, detail = kind.usable()
    return ("ok" if usable else "warn"), detail
