"""One module per `scalerl` subcommand: `HELP`, `configure(parser)`, `run(args) -> int`."""
