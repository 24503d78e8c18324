"""Code: the `code` kind's verifier (one sandbox run per program, compared outside) and code tasks.

`verifier` extracts the program, runs it with all its tests and registers the `code` kind; `plan`
turns test JSON into the harness spec and a judge per record; `rules` holds the comparison rules
(`tokens`, LiveCodeBench's `lcb`, DeepCoder's `taco`); `harness` is the program run inside
the sandbox (read as a file, stdlib only); `asserts` turns HumanEval checks into call tests;
`files` reads APPS/DeepCoder/LiveCodeBench rows; `tasks` holds `humaneval` and `synth_code`;
`public` says which of a sample's tests are public; `feedback` is the `tests_feedback`
environment (code repair from the public tests' failures).
Importing this package imports the verifier only (not the sandbox's backends, not the tasks).
"""

from scalerl.envs.code.verifier import (
    CODE_SYSTEM_PROMPT,
    TestResult,
    default_limits,
    extract_code,
    score_code,
)

__all__ = ["CODE_SYSTEM_PROMPT", "TestResult", "default_limits", "extract_code", "score_code"]
