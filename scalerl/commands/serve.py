"""`scalerl serve`: a vLLM server with exactly what scalerl needs, started and waited for.

The command line is rollout/server_command.py's: the engine arguments the in-process engine
uses (from the same engine flags), the FP32 head, explicit memory, the RL routes (pause, reload,
weight version), the token-in/token-out generate route. This process then becomes the server
(exec: same pid, signals go to vLLM, its exit code is the command's); a forked child prints the
URL alone on stdout once `/health` answers (everything else goes to stderr) and exits.
`--lora-rank R --max-loras N` serves a LoRA run's adapters (`--enable-lora`, runtime adapter
loading). `--print-command` prints the plain command line instead (for SLURM or Kubernetes,
where scalerl need not be installed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import socket
import sys
import time
import urllib.request

from scalerl.commands.engine_args import add_engine_args, engine_config
from scalerl.models import resolve_model

HELP = "start a vLLM server for scalerl (`--server URL`, `engine.servers`) and print its URL"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="Hugging Face model dir, or 'tiny' for the cached tiny model")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8000, help="default 8000")
    parser.add_argument("--device", choices=["cpu", "gpu"],
                        help="where the server runs (default: this machine's kind); decides "
                        "how its KV cache is sized")
    parser.add_argument("--weight-transfer", choices=["files", "nccl"], default="files",
                        help="how the trainer's weights will arrive (the run's "
                        "engine.weight_transfer; default files)")
    parser.add_argument("--start-timeout", type=float, default=900.0,
                        help="seconds to wait for /health (default 900)")
    parser.add_argument("--lora-rank", type=int, default=0,
                        help="serve a LoRA run's adapters of rank up to this (the run's "
                        "policy.lora.rank); default 0: full-weight updates only")
    parser.add_argument("--max-loras", type=int, default=2,
                        help="with --lora-rank: adapters in a batch at once (at least the run's "
                        "offpolicy.max_lag + 1; default 2)")
    parser.add_argument("--print-command", action="store_true",
                        help="print the server's command line and exit")
    add_engine_args(parser, servers=False)


def command_of(args: argparse.Namespace):
    """(model, ServerCommand); ValueError (one line) on a bad flag."""
    from scalerl.rollout.server_command import server_command

    if not 0 < args.port < 65536:
        raise ValueError(f"--port {args.port}: expected 1..65535")
    model = resolve_model(args.model)
    config = dataclasses.replace(engine_config(args, model), weight_transfer=args.weight_transfer)
    if args.lora_rank:  # alpha is each adapter's own (its adapter_config.json): not served here
        from scalerl.rollout.lora import LoraServing

        config = dataclasses.replace(config, lora=LoraServing(
            rank=args.lora_rank, alpha=1.0, max_loras=args.max_loras))
    gpu = None if args.device is None else args.device == "gpu"
    return model, server_command(config, model, host=args.host, port=args.port,
                                 fp32_head=args.fp32_head is not False, gpu=gpu)


def public_url(host: str, port: int) -> str:
    """The URL clients use: the machine's name when listening on every interface."""
    name = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"http://{name}:{port}"


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def announce(server_pid: int, probe: str, url: str, timeout_s: float) -> int:
    """In a child of the server: print `url` once `probe`/health answers (0), or say why not
    (1: the server exited, or it did not answer in time and is stopped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.getppid() != server_pid:
            print("scalerl serve: the server exited before answering /health (its log is above)",
                  file=sys.stderr, flush=True)
            return 1
        if healthy(probe):
            print(url, flush=True)
            return 0
        time.sleep(1.0)
    print(f"scalerl serve: no answer from {probe}/health within {timeout_s:.0f} s "
          "(--start-timeout); stopping the server", file=sys.stderr, flush=True)
    os.kill(server_pid, signal.SIGTERM)
    return 1


def run(args: argparse.Namespace) -> int:
    try:
        model, command = command_of(args)
    except ValueError as exc:
        print(f"scalerl serve: {exc}", file=sys.stderr)
        return 2
    if args.print_command:
        print(command.shell())
        return 0
    if port_in_use(args.host, args.port):
        print(f"scalerl serve: port {args.port} on {args.host} is in use; choose another --port",
              file=sys.stderr)
        return 2
    url = public_url(args.host, args.port)
    probe = f"http://127.0.0.1:{args.port}" if args.host in ("0.0.0.0", "::") else url
    print(f"scalerl serve: starting vLLM for {model} on {url} (waiting for /health)",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    server_pid = os.getpid()
    if os.fork() == 0:
        os._exit(announce(server_pid, probe, url, args.start_timeout))
    # This process becomes the server (signals reach vLLM itself; no supervisor left holding
    # memory); its own output goes to stderr, so stdout carries the URL alone.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    os.execve(sys.executable, [sys.executable, *command.argv], {**os.environ, **command.env})
