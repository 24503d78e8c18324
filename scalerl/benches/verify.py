"""`scalerl bench verify`: math verifications/s through the worker pool vs serial math-verify.

Both sides score the same deterministic mix of realistic completions (thinking + boxed answers,
fractions, roots, intervals, root sets, expressions; about half wrong), in the same run. Then the
worst latency over adversarial inputs (exponent towers, 3,000-deep braces, a 2 MB completion)
through the pool. It measures; it does not tune anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable

from scalerl.benches import positive_int

HELP = "math verifications/s through the worker pool vs serial in-process math-verify"

# (gold as MATH/Polaris store it, answers that are right, answers that are wrong)
Problem = tuple[str, list[str], list[str]]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a smaller mix, one round and fewer adversarial inputs (for tests)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="pool processes (default: min(4, cpu count))")
    parser.add_argument("--prompts", type=positive_int, default=None,
                        help="distinct problems per round (default 30 in each of 6 rounds; "
                        "quick: 16, one round)")
    parser.add_argument("--samples", type=positive_int, default=8,
                        help="completions per problem, as in RL groups (default 8)")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="per-check deadline in seconds for the pool (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the completion mix")


# --- the mix ---------------------------------------------------------------------------------
def _integer(rng: random.Random) -> Problem:
    n = rng.randint(2, 5000)
    return str(n), [str(n), f"{n:,}" if n >= 1000 else f"{n}.0"], [str(n + 1), str(n - 7)]


def _fraction(rng: random.Random) -> Problem:
    a, b = rng.randint(1, 30), rng.randint(31, 97)
    frac = f"\\frac{{{a}}}{{{b}}}"
    return (frac, [frac, f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}"],
            [f"\\frac{{{b}}}{{{a}}}", f"\\frac{{{a + 1}}}{{{b}}}"])


def _root(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 30), rng.choice([2, 3, 5, 6, 7, 10, 11, 13])
    return (f"{a}\\sqrt{{{b}}}", [f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}"],
            [f"{b}\\sqrt{{{a}}}", f"{a}\\sqrt{{{b + 1}}}"])


def _interval(rng: random.Random) -> Problem:
    a = rng.randint(-40, 0)
    b = a + rng.randint(1, 40)
    return (f"[{a}, {b})", [f"[{a},{b})", f"[{a}, {b})"],
            [f"({a}, {b}]", f"[{a}, \\infty)"])


def _roots(rng: random.Random) -> Problem:
    a, b = rng.randint(-40, -1), rng.randint(1, 40)
    return (f"{a}, {b}", [f"{b}, {a}", f"{a}, {b}"], [f"{-a}, {-b}", f"{a}"])


def _expression(rng: random.Random) -> Problem:
    a = rng.randint(1, 60)
    return (f"x^2+{2 * a}x+{a * a}", [f"(x+{a})^2", f"x^2 + {2 * a}x + {a * a}"],
            [f"(x-{a})^2", f"x^2+{a * a}"])


PROBLEMS: tuple[Callable[[random.Random], Problem], ...] = (
    _integer, _fraction, _root, _interval, _roots, _expression,
)
_STEPS = (
    "Let $x$ be the unknown, so $3x + 2 = 11$ and $x = 3$.",
    "We compute $\\frac{12}{4} = 3$ and then $3^2 = 9$.",
    "By the quadratic formula, $x = \\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}$.",
    "Wait, let me double-check the sign: $-(-4) = 4$, so that step holds.",
    "Summing the series gives $\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}$.",
    "Hmm, the interval must exclude the endpoint where the denominator vanishes.",
)
_ENDINGS = (
    "Therefore, the final answer is $\\boxed{{{}}}$.",
    "**Final Answer**\n\\[\n\\boxed{{{}}}\n\\]",
    "So the answer is \\boxed{{{}}}. I hope it is correct.",
)


def make_mix(prompts: int, samples: int, seed: int) -> list[tuple[str, str]]:
    """(completion, gold) pairs: `samples` completions for each of `prompts` problems."""
    rng = random.Random(seed)
    items = []
    for p in range(prompts):
        problem = PROBLEMS[p % len(PROBLEMS)]
        gold, right, wrong = problem(rng)
        for _ in range(samples):
            answer = rng.choice(right) if rng.random() < 0.5 else rng.choice(wrong)
            if problem is _roots and rng.random() < 0.5:  # several boxed answers, read together
                boxed = " and ".join(f"\\boxed{{{a.strip()}}}" for a in answer.split(","))
                ending = f"The solutions are {boxed}."
            else:
                ending = rng.choice(_ENDINGS).format(answer)
            thinking = " ".join(rng.choice(_STEPS) for _ in range(rng.randint(4, 20)))
            items.append((f"<think>\n{thinking}\n</think>\n\n{ending}", gold))
    return items


def adversarial_inputs(quick: bool) -> dict[str, tuple[str, str]]:
    tower = "2^{2^{2^{2^{2^{100}}}}}"
    inputs = {
        "tower_vs_int": (f"The answer is $\\boxed{{{tower}}}$.", "2"),
        "tower_vs_tower": (f"$\\boxed{{{tower}}}$", "2^{2^{2^{2^{2^{99}}}}}"),
        "braces_3000_deep": ("$" + "{" * 3000 + "1" + "}" * 3000 + "$", "1"),
        "completion_2mb": ("Let me think. " * 150_000 + "So $\\boxed{42}$.", "42"),
    }
    if not quick:
        inputs["huge_factorial"] = ("\\boxed{100000!}", "5")
        inputs["nested_fracs_500"] = ("$" + "\\frac{1}{1+" * 500 + "1" + "}" * 500 + "$", "1")
    return inputs


# --- the two sides -----------------------------------------------------------------------------
def _answer_part(completion: str) -> str:
    return completion.rsplit("</think>", 1)[-1]


def _cpu_s(pids: list[int]) -> float:
    """User+system CPU seconds of these processes so far (Linux /proc; 0 where unreadable)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def serial_baseline(items: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    """A naive harness: math-verify in-process with default arguments, gold parsed every time.

    It is given the answer part and the gold as `$gold$`, as the pool is, so both do the same
    work: raw LaTeX gold would make it faster only by failing to parse (and scoring 0)."""
    from math_verify import parse, verify

    cpu0 = time.process_time()
    verdicts = [bool(verify(parse(f"${gold}$"), parse(_answer_part(c)))) for c, gold in items]
    return time.process_time() - cpu0, verdicts


def pool_run(items: list[tuple[str, str]], pool, timeout_s: float):
    """(CPU seconds of the workers and this process, statuses)."""
    from scalerl.envs.math import score_math_many

    pids = pool.worker_pids()
    cpu0, own0 = _cpu_s(pids), time.process_time()
    scores = score_math_many(items, pool=pool, timeout_s=timeout_s)
    cpu = _cpu_s(pids) - cpu0 + time.process_time() - own0
    return cpu, [s.status for s in scores]


def adversarial(pool, timeout_s: float, quick: bool) -> dict[str, dict]:
    from scalerl.envs.math import score_math

    out = {}
    for name, (completion, gold) in adversarial_inputs(quick).items():
        t0 = time.perf_counter()
        s = score_math(completion, gold, pool=pool, timeout_s=timeout_s)
        out[name] = {"status": s.status, "seconds": round(time.perf_counter() - t0, 3)}
    return out


def compare(pool, prompts: int, samples: int, seed: int, rounds: int, timeout_s: float) -> dict:
    """Serial and pool on the same items, alternating, a fresh mix (new golds) each round so
    the pool's gold cache helps only within a round, as within one RL step."""
    totals = Counter()
    statuses: Counter = Counter()
    for r in range(rounds):  # alternate, so load from elsewhere hits both sides alike
        items = make_mix(prompts, samples, seed + r)
        t0 = time.perf_counter()
        base_cpu, verdicts = serial_baseline(items)
        totals["base_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        pool_cpu, got = pool_run(items, pool, timeout_s)
        totals["pool_s"] += time.perf_counter() - t0
        totals["base_cpu"] += base_cpu
        totals["pool_cpu"] += pool_cpu
        totals["items"] += len(items)
        totals["differ"] += sum(v != (g == "correct") for v, g in zip(verdicts, got, strict=True))
        statuses.update(got)
    n = totals["items"]
    return {
        "baseline_per_s": round(n / totals["base_s"], 1),
        "pool_per_s": round(n / totals["pool_s"], 1),
        "ratio": round(totals["base_s"] / totals["pool_s"], 2),
        "items": n,
        "baseline_cpu_ms_per_item": round(1000 * totals["base_cpu"] / n, 2),
        "pool_cpu_ms_per_item": round(1000 * totals["pool_cpu"] / n, 2),
        "pool_statuses": dict(statuses),
        "verdicts_differ": totals["differ"],
    }


def measure(args: argparse.Namespace) -> dict:
    from scalerl.envs.math import make_pool, warm_up

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("scalerl.envs.math").setLevel(logging.ERROR)  # timeouts are reported below
    prompts = args.prompts or (16 if args.quick else 30)
    rounds = 1 if args.quick else 6
    pool = make_pool(args.workers)
    try:
        # Both sides warm: the workers are started (from a warmed forkserver), and this process
        # warms its own parser caches the same way before the serial baseline is timed.
        pool.run_many(os.getpid, [()] * pool.size, timeout_s=120)
        warm_up()
        result = compare(pool, prompts, args.samples, args.seed, rounds, args.timeout)
        adv = adversarial(pool, args.timeout, args.quick)
    finally:
        pool.shutdown()
    return {
        **{k: result[k] for k in ("baseline_per_s", "pool_per_s", "ratio")},
        "adversarial_max_s": max(v["seconds"] for v in adv.values()),
        "adversarial": adv,
        **{k: v for k, v in result.items() if k not in ("baseline_per_s", "pool_per_s", "ratio")},
        "rounds": rounds,
        "workers": pool.size,
        "cpus": os.cpu_count(),
        "timeout_s": args.timeout,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def run(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        print(f"scalerl bench verify: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    result = measure(args)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"math verification, {result['items']} completions in {result['rounds']} rounds:")
    print(f"  serial in-process math-verify: {result['baseline_per_s']:8.1f} /s")
    print(f"  pool ({result['workers']} workers, {result['cpus']} cpus): "
          f"{result['pool_per_s']:8.1f} /s  ({result['ratio']:.2f}x)")
    print(f"  CPU per verification: serial {result['baseline_cpu_ms_per_item']:.2f} ms, "
          f"pool {result['pool_cpu_ms_per_item']:.2f} ms (workers + caller); "
          f"load average {result['load_avg_1m']:.1f}")
    print(f"  pool statuses: {result['pool_statuses']}; "
          f"serial and pool verdicts differ on {result['verdicts_differ']}")
    print(f"adversarial inputs (deadline {result['timeout_s']:g}s), worst "
          f"{result['adversarial_max_s']:.2f}s:")
    for name, v in result["adversarial"].items():
        print(f"  {name:20s} {v['status']:9s} {v['seconds']:6.2f}s")
    return 0
