"""Where the vLLM engine's own output goes: a log file in the run directory, not the terminal.

vLLM logs INFO lines from every process it starts and its workers print native warnings.
`route_vllm_logging` sends vLLM's loggers (this process and its children) to the log; `output_to`
points file descriptors 1 and 2 at the log while the engine starts, so the processes started then
write there for their whole life; `tracker_into` starts multiprocessing's resource tracker on the
log at the start of a command (its report of a killed engine's leftovers is the engine's, not
the user's last line); `hide_progress_bars` turns off
transformers' bars (loading and writing weights at every checkpoint); `last_lines` reads what
the engine said last, for a start that timed out. `scalerl train --verbose`
uses none of them. Nothing here starts or stops an engine; what is printed at the process's end
is scalerl/ending.py's.
"""

from __future__ import annotations

import contextlib
import json
import logging.config
import os
import sys
from collections.abc import Iterator
from pathlib import Path

ENGINE_LOG = "engine.log"
"""The log file's name inside a run directory."""


def logging_config(log_path: Path) -> dict:
    """A `logging.config.dictConfig` mapping that writes vLLM's loggers to `log_path`."""
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(levelname)s %(asctime)s %(process)d "
                                           "[%(filename)s:%(lineno)d] %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_path),
                              "formatter": "plain"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }


def route_vllm_logging(log_path: Path) -> None:
    """vLLM's loggers write to `log_path`, in this process and in every process started after
    this (they read VLLM_LOGGING_CONFIG_PATH when they import vLLM)."""
    log_path = Path(log_path).resolve()
    config = logging_config(log_path)
    config_path = log_path.with_name(log_path.stem + ".logging.json")
    config_path.write_text(json.dumps(config, indent=1))
    os.environ["VLLM_CONFIGURE_LOGGING"] = "1"
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    if "vllm" in sys.modules:  # already configured from the old settings: redo it here
        logging.config.dictConfig(config)


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Inside the block, fds 1 and 2 write to `log_path` (appended); processes started inside
    keep writing there after it (multiprocessing's resource tracker too, when it starts here:
    `tracker_into`). Python's own streams are flushed at both ends."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def tracker_into(log_path: Path) -> None:
    """Start multiprocessing's resource tracker (one per process tree, shared by the engine's
    processes) writing to `log_path`, unless it already runs. What it says is about the engine's
    processes: a core that was killed (out of memory, SIGKILL) leaves shared memory that the
    tracker unlinks at the end and reports; that report belongs with the engine's own last words
    in the log, after scalerl's stop line has named the death."""
    from multiprocessing import resource_tracker

    if getattr(resource_tracker._resource_tracker, "_fd", None) is not None:
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def last_lines(log_path: Path, n: int = 3, width: int = 160) -> str:
    """The last `n` non-blank lines of `log_path` on one line (`|` between them, each cut to
    `width` characters): what an engine that did not start was doing."""
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(unreadable: {exc})"
    tail = [" ".join(line.split())[:width] for line in lines if line.strip()][-n:]
    return " | ".join(tail) or "(empty)"


def hide_progress_bars() -> None:
    """No transformers progress bars (weights loaded or written at every checkpoint)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
