"""The `math` kind's file tasks: user files in Polaris, DeepScaleR or MATH format.

Polaris and DeepScaleR rows have `problem`/`answer`; MATH rows have `problem`/`solution` with the
answer boxed in the solution, which is extracted here (the last `\\boxed{}`). Registers that gold
reader for the `math` kind; the kind itself (scoring, system prompt) lives in envs/math.py.
"""

from __future__ import annotations

from typing import Any

from scalerl.envs.filetask import FileTask, register_gold_reader

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


register_gold_reader("math", ("answer", "solution"), read_math_gold)


def math_file_task(name: str, data: str, **kwargs: Any) -> FileTask:
    """A `math` FileTask: prompt from `prompt`/`problem`/`question`, gold from `answer` or the
    boxed answer in `solution`. Keyword arguments as for `FileTask`."""
    return FileTask(name, "math", data, **kwargs)
