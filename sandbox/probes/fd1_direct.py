# A correct program that writes its answer straight to fd 1.
import os

os.write(1, b"42\n")
