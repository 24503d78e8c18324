# Fills every writable place it finds, file after file; prints the bytes it wrote in total.
import os

total = 0
chunk = b"\0" * (1 << 20)
for place in (".", "/tmp", "/dev/shm", "/var/tmp"):
    for i in range(1000):
        written = 0
        try:
            with open(os.path.join(place, f"fill{i}"), "wb", buffering=0) as f:
                while True:
                    written += f.write(chunk)
        except OSError:  # EFBIG at the file-size limit, ENOSPC when the place is full, EROFS...
            pass
        total += written
        if written == 0:
            break
print(total)
