"""The field's benchmarks and training sets, built in: hub ids, row schemas, grading rules.

`task` holds the one table (`BENCHMARKS`) and `HubTask`; `hub` reads rows from the hub (through
`datasets`, honouring `HF_HUB_OFFLINE` and the cache) or from a local copy in the hub's schema;
`math_sets`, `code_sets` and `livecodebench` register the math sets (MATH-500, AIME 2024/2025,
AMC 2023, GSM8K, Polaris, DeepScaleR), the code sets (MBPP, MBPP+, HumanEval+, DeepCoder) and
LiveCodeBench with its date windows; `evalplus` turns EvalPlus and MBPP tests into the code
verifier's. Importing the package registers them all (the catalog does); it reads no data.
"""

from scalerl.envs.bench import code_sets, livecodebench, math_sets  # noqa: F401 - registers
from scalerl.envs.bench.task import BENCHMARKS, Benchmark, HubTask, register_benchmark

__all__ = ["BENCHMARKS", "Benchmark", "HubTask", "register_benchmark"]
