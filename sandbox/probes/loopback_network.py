# Connects to a host listener on 127.0.0.1:PORT (argv[2]) and to the outside; prints outcomes.
import socket
import sys

port = int(sys.argv[2])
for addr in (("127.0.0.1", port), ("1.1.1.1", 53), ("deb.debian.org", 80)):
    try:
        with socket.create_connection(addr, timeout=1):
            print("CONNECTED", addr)
    except OSError as exc:
        print("refused", addr, type(exc).__name__)
