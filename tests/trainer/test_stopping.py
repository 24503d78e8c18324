"""Stop requests (SIGTERM/SIGUSR1), time-based checkpoints and the stop record."""

import json
import os
import signal

import pytest

from scalerl.trainer.config import CheckpointConfig, FieldError
from scalerl.trainer.stopping import (
    STOP_RECORD,
    TERMINATED,
    StopRequest,
    clear_stop_record,
    clock_due,
    write_stop_record,
)


def test_a_signal_during_the_loop_asks_for_a_stop_and_a_second_sigterm_exits_at_once():
    stop = StopRequest()
    stop.arm()
    stop.handle(signal.SIGUSR1)
    assert stop.reason == "SIGUSR1"
    stop.handle(signal.SIGUSR1)  # asked again: still the first reason, no exit
    assert stop.reason == "SIGUSR1"
    with pytest.raises(SystemExit) as exc:
        stop.handle(signal.SIGTERM)
    assert exc.value.code == TERMINATED == 143


def test_sigterm_before_the_loop_runs_exits_at_once_but_sigusr1_waits_for_it():
    stop = StopRequest()
    with pytest.raises(SystemExit):
        stop.handle(signal.SIGTERM)
    stop = StopRequest()
    stop.handle(signal.SIGUSR1)
    assert stop.reason == "SIGUSR1"  # honoured at the first step boundary


def test_installed_handlers_catch_a_real_signal_sent_to_this_process():
    stop = StopRequest()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        stop.install()
        stop.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reason == "SIGTERM"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_clock_checkpoints_are_due_after_every_s_and_never_when_off():
    assert clock_due(100.0, 60.0, now=160.0)
    assert not clock_due(100.0, 60.0, now=159.9)
    assert not clock_due(0.0, 0.0, now=1e9)  # 0: off


def test_checkpoint_every_s_is_checked():
    assert CheckpointConfig(every_s=3600).every_s == 3600
    with pytest.raises(FieldError, match="every_s"):
        CheckpointConfig(every_s=-1)


def test_the_stop_record_says_where_to_resume_and_a_new_start_clears_it(tmp_path):
    path = write_stop_record(tmp_path, step=12, reason="stopped at step 12 on SIGTERM",
                             exit_code=75)
    assert path.name == STOP_RECORD
    record = json.loads(path.read_text())
    assert record["step"] == 12 and record["exit_code"] == 75 and record["resumable"] is True
    assert record["resume"] == f"scalerl train --run-dir {tmp_path} --resume"
    clear_stop_record(tmp_path)
    assert not path.exists()
    clear_stop_record(tmp_path)  # nothing to clear: fine
