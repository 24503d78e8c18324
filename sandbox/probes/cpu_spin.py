# Spins on the CPU forever: must end as `timeout` (CPU rlimit or wall deadline).
while True:
    pass
