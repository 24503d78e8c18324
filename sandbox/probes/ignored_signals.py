# Ignores every catchable signal, then sleeps: only SIGKILL (of the whole run) can end it.
import contextlib
import signal
import time

for sig in signal.valid_signals():
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        signal.signal(sig, signal.SIG_IGN)
while True:
    time.sleep(0.1)
