# A correct program that reads stdin to EOF, answers, and closes its stdout and stderr before it
# exits (as C programs do at exit: coreutils' close_stdout, `cat`): the verdict must wait for its
# exit, not kill it once its output pipes are closed.
import os
import sys
import time

data = sys.stdin.buffer.read()
os.write(1, f"read {len(data)}\n".encode())
os.close(1)
os.close(2)
time.sleep(0.3)
os._exit(0)
