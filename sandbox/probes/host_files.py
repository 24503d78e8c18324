# Reads host secrets: /etc/shadow, the file the check planted (argv[2]), /root; prints them.
import os
import sys

for path in ("/etc/shadow", sys.argv[2], "/root/.bash_history", "/work/main/pyproject.toml"):
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(200))
    except OSError as exc:
        print("refused", path, type(exc).__name__)
for d in ("/root", "/home", "/work", "/var/run"):
    try:
        print("LIST", d, os.listdir(d))
    except OSError as exc:
        print("refused", d, type(exc).__name__)
