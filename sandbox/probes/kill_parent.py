# SIGKILLs its parent and PID 1, then keeps going: the run must still end cleanly.
import os
import signal
import time

for pid in {os.getppid(), 1}:
    try:
        os.kill(pid, signal.SIGKILL)
        print("sent SIGKILL to", pid)
    except OSError as exc:
        print("refused", pid, type(exc).__name__)
time.sleep(0.3)
print("still here")
