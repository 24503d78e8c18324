# Forks forever (children fork too): the pids limit must stop it and the run must leave nothing.
import os
import time

while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
