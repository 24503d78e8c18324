"""The `scalerl` command: one entry point, one module per subcommand.

Each subcommand lives in `scalerl/commands/<name>.py` and exposes `HELP` (one line),
`configure(parser)` and `run(args) -> int`. Only the subcommand being run is imported (so
`scalerl --help` and the light subcommands never import torch or vLLM); the one-line summaries
below are what `scalerl --help` lists. This module only dispatches; it holds no subcommand logic.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS: dict[str, str] = {
    "tasks": "list and show registered tasks",
    "score": "score model outputs offline (JSONL in, JSONL out)",
    "sandbox": "run programs in the sandbox; list, check and build backends",
    "tiny": "build (or find cached) the tiny CPU model",
    "generate": "generate scored rollouts with the vLLM engine",
    "serve": "start a vLLM server for generation on other processes or machines",
    "train": "train a policy with a ScaleRL recipe",
    "eval": "evaluate checkpoints on held-out sets (pass@k, mean@n)",
    "export": "merge a LoRA run's adapter into its base model (a Hugging Face model)",
    "fit": "fit the sigmoid compute-performance curve",
    "bench": "benchmarks of the hot paths, each beside a baseline",
    "doctor": "check this machine: sandboxes, docker, vLLM engine, memory, GPUs, HF cache",
}
"""name -> the one-line summary `scalerl --help` shows (the module's HELP describes it fully)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported and configured (None: none of them)."""
    parser = argparse.ArgumentParser(
        prog="scalerl",
        description="Verifiable-reward RL for language models on math and code (ScaleRL recipe).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in SUBCOMMANDS.items():
        if name == command:
            module = importlib.import_module(f"scalerl.commands.{name}")
            p = sub.add_parser(name, help=summary, description=module.HELP)
            module.configure(p)
            p.set_defaults(_run=module.run)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The subcommand named in `argv` (the first argument that is one), if any."""
    return next((a for a in argv if a in SUBCOMMANDS), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        _close_pools()
        print(f"scalerl {args.command}: interrupted", file=sys.stderr)
        return 130


def _close_pools() -> None:
    from scalerl.ending import close_pools

    close_pools()


def entry() -> None:
    """The `scalerl` console script and `python -m scalerl`: `main`, then the process ends
    without third-party teardown output after the command's last line (scalerl/ending.py). A
    crash's traceback is that last line, printed once the pools are closed (exit 1)."""
    import traceback

    from scalerl.ending import become_subreaper, exit_process

    become_subreaper()
    try:
        code = main()
    except SystemExit as exc:  # argparse's errors, --help
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, after the pools
        _close_pools()
        traceback.print_exc()
        code = 1
    exit_process(code)


if __name__ == "__main__":
    entry()
