"""The run's experiment trackers (Accelerate's own: `accelerate.tracking`), started each on its own,
fed one whole step at a time, reopened by `--resume`.

`Tracking(names, run, description)` starts every tracker named (trainer/trackers.py says how): one
that is not installed or cannot start (no credentials, no network) is one warning naming it and
the fix, and the others go on. It records the run's description (config, recipe, model, tasks,
versions) once, when a tracked run starts (again only if it changed), and keeps a small record,
`<run-dir>/trackers.json`: each tracker's saved run ids, the last step sent and the description's
hash. `log(step, metrics, tables)` sends one step, once: a step at or before the last one sent (a
resumed run redoing the steps after its checkpoint) is not sent again, so no tracker gets a step
twice. metrics.jsonl is trainer/metrics.py's, written whatever the trackers do; only rank 0
makes a `Tracking` (trainer/loop.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scalerl.trainer.config import LogConfig
from scalerl.trainer.trackers import TRACKERS, TrackedRun, installed

STATE_FILE = "trackers.json"
"""The tracker record in the run directory (also `scalerl eval --out DIR`'s)."""

Table = tuple[list[str], list[list[Any]]]
"""(columns, rows)."""


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def brief(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters, for a tracker's warning."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> `a.b.c` keys with bool/int/float/str values (what every tracker's
    hyperparameters take): lists of mappings by index, other lists as JSON, None as `null`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}.")
        elif isinstance(value, list | tuple) and value and all(isinstance(v, Mapping)
                                                               for v in value):
            out |= flatten({str(i): v for i, v in enumerate(value)}, f"{name}.")
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(list(value))
        elif value is None:
            out[name] = "null"
        else:
            out[name] = value
    return out


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (NaN there means "no data this step")."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


class Tracking:
    """The started trackers of one run, by name, and the run directory's tracker record."""

    def __init__(self, names: Sequence[str], run: TrackedRun, description: Mapping[str, Any],
                 *, report: Callable[[str], None] = warn):
        self.run, self.report = run, report
        self.path = Path(run.run_dir) / STATE_FILE
        self.state = self._load()
        self.trackers: dict[str, Any] = {}
        for name in names:
            self._start(name, self.state["runs"].get(name))
        self._describe(dict(description))
        self._save()

    @property
    def last_step(self) -> int:
        """The last step sent to the trackers (-1: none yet)."""
        return int(self.state["last_step"])

    def _load(self) -> dict[str, Any]:
        state = {"runs": {}, "last_step": -1, "description": {}, "described": {}}
        if self.path.is_file():
            try:
                state |= json.loads(self.path.read_text())
            except json.JSONDecodeError as exc:
                self.report(f"{self.path}: unreadable ({exc.msg}); the trackers start new runs")
        return state

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.path)

    def _start(self, name: str, saved: dict[str, Any] | None) -> None:
        """Start Accelerate's tracker `name` (reopening `saved`) into `self.trackers`, with what
        reopens it in the record; one warning when it cannot (the record keeps `saved`)."""
        kind = TRACKERS[name]
        if not installed(name):
            self.report(f"tracker {name} is not installed: {kind.install}; the run goes on "
                        "without it")
            return
        from accelerate import PartialState
        from accelerate.tracking import LOGGER_TYPE_TO_CLASS

        PartialState()  # Accelerate's trackers log through it (the trainer's Accelerator made it)
        try:
            args, kwargs = kind.arguments(self.run, saved or None)
            tracker = LOGGER_TYPE_TO_CLASS[name](*args, **kwargs)
            tracker.start()
            self.state["runs"][name] = kind.saved(tracker)
        except Exception as exc:  # not fatal: the run goes on with the others
            what = brief(exc)
            fix = f"; fix: {kind.fix}" if kind.fix else ""
            again = f" (reopening its saved run {saved})" if saved else ""
            self.report(f"tracker {name} could not start{again}: {what}{fix}; the run goes on "
                        "without it")
            return
        self.trackers[name] = tracker

    def _describe(self, description: dict[str, Any]) -> None:
        """Record the description with every tracker that lacks this version of it (a new
        tracked run, or a resume that changed a setting); unknown values (None: the recipe of a
        resumed run) keep what was recorded before."""
        description = self.state["description"] | {k: v for k, v in description.items()
                                                    if v is not None}
        values = flatten(description)
        sha = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
        described = self.state["described"]
        for name in [n for n in self.trackers if n not in described
                     or (described[n] != sha and TRACKERS[n].redescribe)]:
            if self._call(name, "store_init_configuration", values, drop=False):
                described[name] = sha
        self.state["description"] = description

    def _call(self, name: str, method: str, *args: Any, drop: bool = True, **kwargs: Any
              ) -> bool:
        """One call on tracker `name`, True when it worked; a failure is one warning, and the
        tracker is dropped (`drop`) so that it does not warn at every step."""
        try:
            getattr(self.trackers[name], method)(*args, **kwargs)
        except Exception as exc:
            what = brief(exc)
            gone = "; the run goes on without it" if drop else ""
            self.report(f"tracker {name} failed ({method}): {what}{gone}")
            if drop:
                del self.trackers[name]
            return False
        return True

    def log(self, step: int, metrics: Mapping[str, Any],
            tables: Mapping[str, Table] | None = None) -> bool:
        """Send step `step` (its finite scalars and tables) to every tracker, unless a step at or
        after it was sent already; True when sent."""
        if step <= self.last_step:
            return False
        values = scalars(metrics)
        for name in list(self.trackers):
            kind = TRACKERS[name]
            row: dict[str, Any] = dict(values)
            if kind.table is not None:
                for key, (columns, rows) in (tables or {}).items():
                    row[key] = kind.table(columns, rows)
            self._call(name, "log", row, step=step, **kind.log_kwargs)
        self.state["last_step"] = step
        self._save()
        return True

    def finish(self) -> None:
        for name in list(self.trackers):
            self._call(name, "finish")
        self.trackers.clear()


def start_tracking(log: LogConfig, run_dir: Path, description: Mapping[str, Any]
                   ) -> Tracking | None:
    """A training run's trackers from its `log` settings (None when `log.trackers` is empty);
    the tracked runs its directory's record names are reopened."""
    if not log.trackers:
        return None
    run = TrackedRun(project=log.project, run_name=log.run_name or Path(run_dir).resolve().name,
                     tags=log.tags, run_dir=Path(run_dir))
    return Tracking(log.trackers, run, description)
