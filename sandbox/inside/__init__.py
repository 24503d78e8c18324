"""The programs that run INSIDE the sandbox; the grader ships them in and never imports them.

`supervisor.py`: the per-run supervisor (rlimits, the program, the report, killing the rest), used
by every backend (the `process` backend runs it as a plain child process: no sandbox there).
`warm_init.py`: PID 1 of a warm bwrap worker (a fork per run, a wipe between runs). Both import only
builtin or tiny modules and travel as source text (`python3 -I -c`) or compiled once by the
sandbox's interpreter (host_run.compiled_inside_dir). Host code lives one level up; nothing here
imports it.
"""
