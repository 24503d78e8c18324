"""One module per `scalerl bench NAME`: `HELP`, `configure(parser)`, `run(args) -> int`.

Every benchmark measures its hot path beside a baseline in the same run and prints the ratio,
since these machines are noisy; `--json` prints one JSON object on stdout.
"""

import argparse


def positive_int(text: str) -> int:
    """argparse type for counts: a one-line usage error for 0, negatives and non-numbers."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
