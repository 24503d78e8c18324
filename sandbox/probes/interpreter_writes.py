# Tries to change the interpreter and its library; prints WROTE for anything that worked.
import os
import sys
import sysconfig

targets = [sys.executable, "/usr/bin/python3", os.__file__,
           os.path.join(sysconfig.get_paths()["purelib"], "sitecustomize.py"),
           os.path.join(os.path.dirname(os.__file__), f"scalerl_probe_{sys.argv[1]}.py")]
for path in targets:
    try:
        with open(path, "ab") as f:
            f.write(b"# pwned\n")
        print("WROTE", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
