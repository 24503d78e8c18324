"""Whether the trainer node's spare CPU cores can grade a step in the time the engines take to
generate it (`scalerl train --dry-run`), and when grading needs Ray (`verifiers.cluster: ray`).

`grading_load` is a pure function: a step's code and math verdicts times the CPU seconds each
costs (measured here, below) is the core-seconds of grading one step; over the engines' generate
time (scalerl/planning/throughput.py) that is the cores grading keeps busy, against the node's
cores less what the trainer ranks and the engines use. Grading overlaps generation (verdicts are
given as rollouts finish), so generate time is the budget. Multi-turn tool sessions are not
counted (their interpreters live for the rollout: docs/scale-out.md sizes them), nor the grader's
own memory. A model with stated assumptions, not a measurement of a GPU node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CODE_RUN_CPU_S = 0.043
"""CPU seconds of one code verdict's sandbox and harness, besides its tests: a 1-test stdio
problem graded by `score_code` on bwrap-cold took 54.9 ms of CPU (this process and its reaped
children, getrusage; 20 verdicts), 10 tests 159.2 ms, so 43 ms + 11.6 ms per test. Measured here
(2 shared cores; CPU time does not depend on the load). HumanEval's canonical solutions (call
tests, one process): 38.05 ms per problem (`scalerl bench code --n 164 --synth 0 --workers 2
--backend bwrap-cold --json`, cpu_ms_per_problem). bwrap-cold starts a sandbox per run: the warm
default backend costs less."""
CODE_TEST_CPU_S = 0.0116
"""CPU seconds of each stdio test (its own interpreter start, the comparison): see above."""
CODE_TESTS = 10
"""Tests per code problem. An assumption: DeepCoder keeps problems with at least 5 tests (its
dataset card, agentica-org/DeepCoder-Preview-Dataset); TACO and Codeforces rows carry more."""
SPIN_SHARE = 0.1
"""Share of code verdicts whose program is CPU-bound until every test's deadline (time limit
exceeded on all of them: each costs tests x the test timeout of CPU). An assumption (no public
figure for an 8B policy's TLE rate); it dominates the code cost, and 0 is the floor."""
TEST_TIMEOUT_S = 4.0
"""Each code test's deadline (envs/code/verifier.py DEFAULT_TEST_TIMEOUT_S)."""
MATH_VERIFY_CPU_S = 0.00351
"""CPU seconds of one math verification through the worker pool: 3.51 ms per item (`scalerl bench
verify --workers 2 --json`: pool_cpu_ms_per_item over 1,440 realistic completions, about half
wrong; 285 verifications per core-second)."""
NODE_CORES = 112
"""CPU cores of an 8-GPU node when the dry run is told of its GPUs rather than run on it: the
NVIDIA DGX H100 and H200 have 2 x Intel Xeon Platinum 8480C, 112 cores (NVIDIA DGX H100/H200
datasheet). An assumption for other nodes."""
CORES_PER_RANK = 2
"""Cores a trainer rank keeps busy: its Python thread launching kernels, plus NCCL's and the
data path's threads. An assumption."""
CORES_PER_ENGINE = 2
"""Cores a vLLM engine keeps busy besides one per GPU worker: its API server (HTTP,
detokenising) and its EngineCore's scheduler loop (vLLM 0.32's V1 process layout). An
assumption."""
RUN_CORES = 4
"""Cores the run's own process keeps (the rollout loop, the scorer threads, data, logging). An
assumption."""


@dataclass(frozen=True)
class GradingLoad:
    """One step's grading against the node's spare cores."""

    code_verdicts: int
    """Code rollouts per step."""
    math_verdicts: int
    """Math rollouts per step."""
    core_s: float
    """CPU seconds of grading one step."""
    generate_s: float
    """Seconds the engines take to generate one step (the grading's budget)."""
    spare_cores: int
    """The node's cores less the trainer ranks', the engines' and the run's own."""
    node_cores: int
    """Cores of the node (and of each grading node Ray would add)."""

    @property
    def cores(self) -> float:
        """Cores grading keeps busy while a step generates."""
        return self.core_s / self.generate_s

    @property
    def ray(self) -> bool:
        """More than the node's spare cores: grading must move off the node."""
        return self.cores > self.spare_cores

    @property
    def nodes(self) -> int:
        """Grading nodes of `node_cores` each a step needs beside the trainer node's spare."""
        return max(0, math.ceil((self.cores - self.spare_cores) / self.node_cores))


def verdict_core_s(kind: str, *, tests: int = CODE_TESTS, spin_share: float = SPIN_SHARE,
                   test_timeout_s: float = TEST_TIMEOUT_S) -> float:
    """CPU seconds of one verdict of `kind` (code | math): a code verdict's run and tests, plus
    its share of programs spinning to every test's deadline."""
    if kind == "math":
        return MATH_VERIFY_CPU_S
    if kind != "code":
        raise ValueError(f"verdict kind {kind!r}: expected code or math")
    return CODE_RUN_CPU_S + tests * CODE_TEST_CPU_S + spin_share * tests * test_timeout_s


def spare_cores(node_cores: int, *, ranks: int, engines: int, tp: int) -> int:
    """The node's cores less `ranks` trainer ranks', `engines` engines' of `tp` GPUs each and the
    run's own (never below 0)."""
    used = ranks * CORES_PER_RANK + engines * (CORES_PER_ENGINE + tp) + RUN_CORES
    return max(0, node_cores - used)


def grading_load(*, rollouts_per_step: int, code_share: float, generate_s: float,
                 node_cores: int, ranks: int, engines: int, tp: int = 1,
                 code_core_s: float | None = None,
                 math_core_s: float = MATH_VERIFY_CPU_S) -> GradingLoad:
    """One step of `rollouts_per_step`, `code_share` of them code and the rest math, graded on
    the node's spare cores while the engines generate for `generate_s` seconds."""
    if not 0.0 <= code_share <= 1.0:
        raise ValueError(f"code_share must be in [0, 1], got {code_share}")
    if generate_s <= 0:
        raise ValueError(f"generate_s must be > 0, got {generate_s}")
    code = round(rollouts_per_step * code_share)
    maths = rollouts_per_step - code
    per_code = verdict_core_s("code") if code_core_s is None else code_core_s
    return GradingLoad(code_verdicts=code, math_verdicts=maths,
                       core_s=code * per_code + maths * math_core_s, generate_s=generate_s,
                       spare_cores=spare_cores(node_cores, ranks=ranks, engines=engines, tp=tp),
                       node_cores=node_cores)


def grading_line(load: GradingLoad | None) -> list[str]:
    """The estimate as one printed line (none without a generate time)."""
    if load is None:
        return []
    head = (f"grading: {load.code_verdicts} code + {load.math_verdicts} math verdicts per step "
            f"= {load.core_s:,.0f} core-s (scalerl/planning/grading_load.py: {CODE_TESTS} tests "
            f"per problem, {SPIN_SHARE:.0%} spinning to every deadline) over the "
            f"{load.generate_s:,.0f} s a step generates: {load.cores:.1f} cores of the "
            f"{load.spare_cores} spare of {load.node_cores}")
    if load.ray:
        return [head + f": needs verifiers.cluster: ray, {math.ceil(load.cores)} grading cores "
                f"({load.nodes} more node(s) of {load.node_cores} cores)"]
    return [head + ": local grading keeps up (verifiers.cluster: ray not needed)"]


def code_share_of(tasks) -> float:
    """The share of rollouts that are code: the weights of the tasks whose kind is code."""
    from scalerl.envs.catalog import get_task

    total = sum(t.weight for t in tasks)
    code = sum(t.weight for t in tasks
               if getattr(get_task(t.name).kind, "value", get_task(t.name).kind) == "code")
    return code / total if total else 0.0


def plan_grading(cfg, plan, *, local: int, engines: int, tp: int,
                 node_cores: int = NODE_CORES) -> GradingLoad | None:
    """The dry run's estimate for run config `cfg` and its throughput plan `plan` (None without
    one): `local` trainer ranks and `engines` engines of `tp` GPUs on the node."""
    if plan is None or plan.generate_s <= 0:
        return None
    o = cfg.offpolicy
    return grading_load(rollouts_per_step=o.prompts_per_step * o.rollouts_per_prompt,
                        code_share=code_share_of(cfg.tasks), generate_s=plan.generate_s,
                        node_cores=node_cores, ranks=local, engines=engines, tp=tp)
