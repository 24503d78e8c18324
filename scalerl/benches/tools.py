"""`scalerl bench tools`: a user's function tool through the guarded path vs a direct call.

The guarded path is what an episode runs for every call (envs/tool_env.py): the chat format
parses the turn's `<tool_call>` JSON, the arguments are checked against the function's schema
(jsonschema), the function runs on the tool thread pool under its time limit, and its output is
rendered and capped. The baseline calls the same function directly with the same arguments, in
the same run. Both figures are calls per second on this machine; the ratio is what the guards
cost. It measures; it tunes nothing.
"""

from __future__ import annotations

import argparse
import json
import time

from scalerl.benches import positive_int

HELP = "user function tool calls/s through the guarded path (parse, schema, thread, cap) vs direct"


def lookup(country: str, limit: int = 3) -> dict:
    """Look a country up.

    Args:
        country: the country's name
        limit: how many facts at most
    """
    return {"country": country, "facts": list(range(limit))}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=positive_int, default=2000,
                        help="calls per side (default 2000)")


def _turn(i: int) -> str:
    body = json.dumps({"name": "lookup", "arguments": {"country": f"c{i}", "limit": i % 5}})
    return f"<tool_call>\n{body}\n</tool_call>"


def measure(calls: int) -> dict:
    from scalerl.envs.base import Sample
    from scalerl.envs.environment import EnvContext
    from scalerl.envs.tool_env import ToolEnvironment
    from scalerl.envs.tool_format import tool_format
    from scalerl.envs.turns import Play

    args = [{"country": f"c{i}", "limit": i % 5} for i in range(calls)]
    start = time.perf_counter()
    direct = [json.dumps(lookup(**a)) for a in args]
    direct_s = time.perf_counter() - start

    env = ToolEnvironment([lookup])
    sample = Sample(id="b", task="bench", prompt="q")
    play = Play(env, sample, EnvContext(tool_format=tool_format("chat")))
    play.start()
    turns = [_turn(i) for i in range(calls)]
    outputs = []
    start = time.perf_counter()
    for text in turns:
        reply = play.answer([{"role": "assistant", "content": text}], 0).reply
        outputs.append(reply.outcomes[0].output)
    guarded_s = time.perf_counter() - start
    play.close()
    if outputs != direct:
        raise RuntimeError("the guarded path's outputs differ from the direct calls'")
    return {"calls": calls, "baseline_per_s": calls / direct_s, "guarded_per_s": calls / guarded_s,
            "ratio": direct_s / guarded_s,
            "guard_us_per_call": (guarded_s - direct_s) / calls * 1e6}


def run(args: argparse.Namespace) -> int:
    result = measure(args.calls)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"direct calls        {result['baseline_per_s']:>12,.0f}/s (baseline)")
    print(f"guarded tool calls  {result['guarded_per_s']:>12,.0f}/s  "
          f"({result['ratio']:.3f}x the baseline; {result['guard_us_per_call']:.0f} us a call "
          "for parsing, the schema check, the thread and the cap)")
    return 0
