# Starts threads forever: the pids/memory limits must stop it.
import threading
import time

threads = []
while True:
    t = threading.Thread(target=time.sleep, args=(1000,), daemon=True)
    t.start()
    threads.append(t)
