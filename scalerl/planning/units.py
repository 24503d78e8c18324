"""Units of the planning model: bytes per element of each dtype, and the GiB. Constants only,
shared by sizing.py and lora_sizing.py (which must not import each other both ways)."""

GIB = 2**30
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per element of the dtypes a run computes or stores in."""
