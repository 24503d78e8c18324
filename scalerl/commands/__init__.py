"""One module per `scalerl` subcommand: `HELP`, `configure(parser)`, `run(args) -> int`.

`CommandError` is how a command's shared work (what `run` and `scalerl.api` both call) stops:
its message is the line `run` prints on stderr, its `exit_code` the status `run` returns.
"""

from __future__ import annotations


class CommandError(Exception):
    """A command stopped: bad input, a machine that cannot run it, a run stopped early.

    `str(exc)` is exactly what `scalerl COMMAND` prints on stderr (one line, or one line per
    task that cannot be verified here); `exit_code` is the exit status it returns."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
