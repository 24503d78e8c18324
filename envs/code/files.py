"""The `code` kind's data files: APPS / TACO / DeepCoder / LiveCodeBench rows -> test JSON.

User files in APPS / TACO (`input_output`: inputs, outputs, optional fn_name), DeepCoder and
LiveCodeBench (`tests` / `public_test_cases`: a list of {input, output, testtype}, or
PrimeIntellect's {type: stdin_stdout | function_call, input, output[, fn_name]}) formats are
read into the verifier's `stdio` / `call` test JSON (envs/code/verifier.py), or taken as is when
already in it. The code kind reads file rows with these; a code file task is
`FileTask(name, "code", data, ...)` (envs/filetask.py). Pure functions: no I/O, nothing runs.
"""

from __future__ import annotations

import json
from typing import Any

from scalerl.envs.base import truncate

CODE_COLUMNS: tuple[str, ...] = ("tests", "input_output", "public_test_cases")
"""Gold columns tried, in order, for a `code` file task."""


def read_code_tests(value: Any, column: str) -> dict[str, Any]:
    """Test JSON for the verifier from one row's gold value; ValueError says what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at char {exc.pos})") from exc
    if isinstance(value, dict) and "type" in value:
        return dict(value)  # already the verifier's format
    if isinstance(value, dict) and "inputs" in value and "outputs" in value:
        return _from_apps(value)
    if isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
        return _from_test_list(value)
    raise ValueError("expected {inputs, outputs[, fn_name]} (APPS), a list of {input, output, "
                     "testtype} (LiveCodeBench/DeepCoder) or {type: stdio|call|assert, ...}")


def _from_apps(io: dict[str, Any]) -> dict[str, Any]:
    inputs, outputs = io["inputs"], io["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise ValueError("`inputs` and `outputs` must be non-empty lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    if io.get("fn_name"):
        # APPS/TACO wrap each call's result in a list; their checker accepts either form.
        return {"type": "call", "fn_name": io["fn_name"], "inputs": inputs, "outputs": outputs,
                "unwrap_outputs": True}
    return {"type": "stdio", "inputs": inputs, "outputs": outputs}


def _from_test_list(tests: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = {str(t.get("testtype", t.get("type", "stdin"))) for t in tests}
    if kinds <= {"stdin", "stdin_stdout"}:
        return {"type": "stdio", "inputs": [_field(t, "input") for t in tests],
                "outputs": [_field(t, "output") for t in tests]}
    if kinds <= {"functional", "function_call"}:
        names = {_fn_name(t) for t in tests}
        if len(names) != 1 or None in names:
            raise ValueError("functional tests need one function name (fn_name, func_name or "
                             f"metadata.func_name on each test); found {sorted(map(str, names))}")
        out = {"type": "call", "fn_name": names.pop(),
               "inputs": [_json_lines(_field(t, "input")) for t in tests],
               "outputs": [_json_value(_field(t, "output")) for t in tests]}
        if "function_call" in kinds:  # PrimeIntellect keeps each result wrapped, as TACO does
            out["unwrap_outputs"] = True
        return out
    raise ValueError(f"mixed or unknown test types {sorted(kinds)}; expected stdin or functional")


def _field(test: dict[str, Any], name: str) -> Any:
    if name not in test:
        raise ValueError(f"a test has no {name!r} (keys: {', '.join(test)})")
    return test[name]


def _fn_name(test: dict[str, Any]) -> str | None:
    meta = test.get("metadata")
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip().startswith("{") else {}
    return test.get("fn_name") or test.get("func_name") or (meta or {}).get("func_name")


def _json_lines(text: Any) -> list[Any]:
    """LiveCodeBench functional input: one JSON argument per line."""
    if isinstance(text, list):
        return text
    return [_json_value(line) for line in str(text).split("\n") if line.strip()]


def _json_value(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"functional test value is not JSON: {truncate(text, 60)!r}") from exc
