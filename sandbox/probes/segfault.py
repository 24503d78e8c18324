# Dereferences NULL: must end as `runtime_error` with signal 11 (SIGSEGV).
import ctypes

ctypes.string_at(0)
