# Tries to write outside the work dir, /tmp and /dev/shm; prints WROTE for anything that worked.
import os

for path in ("/x", "/etc/x", "/dev/x", "/usr/x", "/proc/x", "/bin/x"):
    try:
        with open(path, "w") as f:
            f.write("x")
        print("WROTE", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
print("mkdir", [d for d in ("/newdir", "/dev/newdir") if not os.system(f"mkdir {d} 2>/dev/null")])
