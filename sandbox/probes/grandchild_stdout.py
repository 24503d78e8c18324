# Leaves a grandchild holding stdout open for 1000 s and exits: the verdict must still be prompt.
import os
import sys

token = sys.argv[1]
if os.fork() == 0:
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "sleep 1000", token])
    os._exit(0)
os.wait()
print("parent done")
sys.stdout.flush()
