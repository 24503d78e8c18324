# Allocates and touches 2 GiB in 16 MiB pieces: must end as `memory_limit`.
keep = []
for _ in range(128):
    keep.append(bytearray(16 << 20))  # bytearray(n) zero-fills: the pages are really touched
print("allocated 2 GiB: the memory limit did not hold")
