# Prints every environment it can reach: its own, PID 1's, and every /proc/*/environ and cmdline.
import os

print(dict(os.environ))
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid == "self":
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    print(pid, name, f.read())
            except OSError as exc:
                print(pid, name, "refused", type(exc).__name__)
