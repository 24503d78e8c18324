# Double-forks a daemon (new session) that runs forever under the check's token, then exits 0.
import os
import sys

token = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        os.execvp("sh", ["sh", "-c", "while :; do sleep 0.2; done", token])
    os._exit(0)
os.wait()
print("daemon started")
