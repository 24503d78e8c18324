"""The `scalerl` command: one entry point, one module per subcommand.

Each subcommand lives in `scalerl/commands/<name>.py` and exposes `HELP` (one line),
`configure(parser)` and `run(args) -> int`. A subcommand whose module does not exist yet says so
in one line and exits 2. This module only dispatches; it holds no subcommand logic.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help used when the module is not built yet, issue that builds it)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tasks": ("list and show registered tasks", "#2"),
    "score": ("score model outputs offline (JSONL in, JSONL out)", "#2"),
    "sandbox": ("run programs in the sandbox; list, check and build backends", "#3"),
    "tiny": ("build (or find cached) the tiny CPU model", "#4"),
    "generate": ("generate scored rollouts with the vLLM engine", "#4"),
    "train": ("train a policy with a ScaleRL recipe", "#5"),
    "eval": ("evaluate checkpoints on held-out sets (pass@k, mean@n)", "#6"),
    "fit": ("fit the sigmoid compute-performance curve", "#6"),
    "bench": ("benchmarks of the hot paths, each beside a baseline", "#2"),
}


def _load(name: str):
    try:
        return importlib.import_module(f"scalerl.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"scalerl.commands.{name}":
            return None
        raise


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="scalerl",
        description="Verifiable-reward RL for language models on math and code (ScaleRL recipe).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (summary, _issue) in SUBCOMMANDS.items():
        module = _load(name)
        modules[name] = module
        help_text = module.HELP if module else f"{summary} (not built yet)"
        p = sub.add_parser(name, help=help_text, description=help_text)
        if module:
            module.configure(p)
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module = modules[args.command]
    if module is None:
        summary, issue = SUBCOMMANDS[args.command]
        print(f"scalerl {args.command}: not built yet ({summary}; tracked in issue {issue})",
              file=sys.stderr)
        return 2
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"scalerl {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
