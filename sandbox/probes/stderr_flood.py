# Writes to stderr (fd 2, unbuffered) forever: must end as `output_limit`.
import os

chunk = b"e" * 65536
while True:
    os.write(2, chunk)
