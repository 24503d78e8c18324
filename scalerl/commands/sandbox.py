"""`scalerl sandbox`: list backends, run a program, the hostile-program check, build the image.

`backends [--json]`, `run FILE [--stdin FILE] [--backend NAME] [--timeout S] [--memory-mb N]`
(prints the ExecResult as one JSON object; exit 0 whenever the sandbox itself worked),
`check [--backend NAME]` (exit 1 if any probe escaped), `image [--force]`. Only glue: the work is
in `scalerl.sandbox`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

HELP = "run programs in the sandbox; list, check and build backends"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sandbox_cmd", metavar="ACTION", required=True)
    p = sub.add_parser("backends", help="which backends work here, and why not")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(_action=_backends)

    p = sub.add_parser("run", help="run one Python file in the sandbox; print the result as JSON")
    p.add_argument("file", type=Path, help="the Python program to run")
    p.add_argument("--stdin", type=Path, help="file whose bytes become the program's stdin")
    p.add_argument("--backend",
                   help="bwrap, bwrap-cold, docker or process (default: bwrap, else docker)")
    p.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds (default 10)")
    p.add_argument("--memory-mb", type=int, default=512, help="memory limit in MiB (default 512)")
    p.set_defaults(_action=_run)

    p = sub.add_parser("check", help="run the hostile-program suite; exit 1 if anything escaped")
    p.add_argument("--backend", help="backend to check (default: every available one)")
    p.add_argument("--probe", action="append", help="only this probe (repeatable)")
    p.set_defaults(_action=_check)

    p = sub.add_parser("image", help="build the docker image scalerl-sandbox:latest")
    p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    p.set_defaults(_action=_image)


def run(args: argparse.Namespace) -> int:
    return args._action(args)


def _backends(args: argparse.Namespace) -> int:
    from scalerl.sandbox import available_backends

    table = {n: {"available": ok, "reason": why} for n, (ok, why) in available_backends().items()}
    if args.json:
        print(json.dumps(table))
    else:
        for name, row in table.items():
            print(f"{name:8s} {'yes' if row['available'] else 'no ':3s}  {row['reason']}")
    return 0


def _get(name: str | None):
    from scalerl.sandbox import get_backend
    from scalerl.sandbox.process import NotASandboxWarning

    with warnings.catch_warnings():  # the process backend also prints its warning on stderr
        warnings.simplefilter("ignore", NotASandboxWarning)
        return get_backend(name)


def _run(args: argparse.Namespace) -> int:
    from scalerl.sandbox import Limits

    for path in (args.file, args.stdin):
        if path is not None and not path.is_file():
            print(f"scalerl sandbox run: no such file: {path}", file=sys.stderr)
            return 2
    try:
        limits = Limits(wall_s=args.timeout, cpu_s=args.timeout, memory_mb=args.memory_mb)
        backend = _get(args.backend)
    except (ValueError, RuntimeError) as exc:
        print(f"scalerl sandbox run: {exc}", file=sys.stderr)
        return 2
    stdin = args.stdin.read_bytes() if args.stdin else b""
    result = backend.run(["python", "main.py"], stdin=stdin,
                         files={"main.py": args.file.read_bytes()}, limits=limits)
    print(json.dumps(result.to_json()))
    return 1 if result.status == "sandbox_error" else 0


def _check(args: argparse.Namespace) -> int:
    from scalerl.sandbox import available_backends
    from scalerl.sandbox.selfcheck import PROBE_NAMES, run_suite

    unknown = sorted(set(args.probe or ()) - set(PROBE_NAMES))
    if unknown:
        print(f"scalerl sandbox check: unknown probe(s) {unknown}; known: {list(PROBE_NAMES)}",
              file=sys.stderr)
        return 2
    names = [args.backend] if args.backend else [
        n for n, (ok, _) in available_backends().items() if ok and n != "process"]
    if not names:
        print("scalerl sandbox check: no sandbox backend available here "
              "(see `scalerl sandbox backends`)", file=sys.stderr)
        return 1
    escaped = 0
    for name in names:
        try:
            backend = _get(name)
        except (ValueError, RuntimeError) as exc:
            print(f"scalerl sandbox check: {exc}", file=sys.stderr)
            return 2
        escaped += _check_one(backend, run_suite(backend, tuple(args.probe) if args.probe
                                                  else None))
    print(f"{escaped} escape(s)" if escaped else "every probe was contained")
    return 1 if escaped else 0


def _check_one(backend, verdicts) -> int:
    from scalerl.sandbox.selfcheck import PROBE_NAMES

    print(f"== {backend.name}")
    for v in verdicts:
        mark = "ok     " if not v.escaped else "ESCAPED"
        print(f"  {mark} {v.probe:18s} {v.status:13s} {v.wall_s:6.2f}s  {v.escaped or v.detail}")
    contains = getattr(backend, "contains", None)
    escaped = sum(1 for v in verdicts if v.escaped)
    if contains is not None:
        uncovered = [n for n in PROBE_NAMES if n not in contains]
        print(f"  NOT CONTAINED by design ({backend.name} is not a security boundary): "
              f"{', '.join(uncovered)}")
        escaped += len(uncovered)
    return escaped


def _image(args: argparse.Namespace) -> int:
    import docker
    import docker.errors

    from scalerl.sandbox.docker_image import IMAGE, build_image

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        print(f"scalerl sandbox image: docker daemon not reachable ({exc}); start dockerd "
              "(e.g. dockerd --storage-driver=vfs --iptables=false --bridge=none)", file=sys.stderr)
        return 1
    how = build_image(client, force=args.force, log=lambda m: print(m, file=sys.stderr))
    print(f"{IMAGE}: {'already present' if how == 'exists' else 'built with ' + how}")
    return 0
