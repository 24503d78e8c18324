"""One module per `scalerl bench NAME`: `HELP`, `configure(parser)`, `run(args) -> int`.

Every benchmark measures its hot path beside a baseline in the same run and prints the ratio,
since these machines are noisy; `--json` prints one JSON object on stdout.
"""
