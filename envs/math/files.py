"""The `math` kind's data files: the gold answer of Polaris, DeepScaleR and MATH rows.

Polaris and DeepScaleR rows have `problem`/`answer`; MATH rows have `problem`/`solution` with the
answer boxed in the solution, which is extracted here (the last `\\boxed{}`). The math kind
(envs/math/verifier.py) reads file rows with these; a math file task is
`FileTask(name, "math", data, ...)` (envs/filetask.py). Pure text functions: no I/O, no scoring.
"""

from __future__ import annotations

from typing import Any

MATH_GOLD_COLUMNS: tuple[str, ...] = ("answer", "solution")
"""Gold columns tried, in order, for a `math` file task."""
_BOXED = ("\\boxed{", "\\fbox{")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, braces balanced."""
    start = max(text.rfind(b) for b in _BOXED)
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def read_math_gold(value: Any, column: str) -> str:
    """Gold answer from a row value: as is, or the last boxed content when the value has one."""
    text = str(value).strip()
    if any(b in text for b in _BOXED):
        boxed = last_boxed(text)
        if not boxed:
            raise ValueError(f"unbalanced or empty \\boxed{{}} in {text[-80:]!r}")
        return boxed
    if column == "solution":
        raise ValueError("the solution has no \\boxed{} answer (MATH format needs one)")
    return text
