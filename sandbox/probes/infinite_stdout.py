# Writes to stdout forever: must end as `output_limit`, promptly, with stdout cut at the cap.
import sys

line = "x" * 65535 + "\n"
while True:
    sys.stdout.write(line)
