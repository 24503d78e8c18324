"""LiveCodeBench's official prompt for chat models: its system message and its question template.

LiveCodeBench's runner (`lcb_runner/prompts/code_generation.py`, the generic chat style it uses
for OpenAI-style chat models) sends a system message and a user turn of the form
`### Question:` (the problem), `### Format:` (complete the starter code, or read standard input
and write standard output, each with a python block to fill) and `### Answer:`. `lcb_messages`
builds exactly that from a problem's text and starter code. Pure text: nothing here reads data or
grades.
"""

from __future__ import annotations

LCB_SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) "
    "and will generate a correct Python program that matches the specification and passes all "
    "tests."
)
"""The system message of LiveCodeBench's generic chat prompt."""
FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters."
)
FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly "
    "test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when "
    "the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)
ANSWER_LINE = "### Answer: (use the provided format with backticks)\n\n"


def lcb_user_prompt(question: str, starter_code: str = "") -> str:
    """The user turn: the question, the format (starter code, or stdin/stdout) and the answer
    line, as LiveCodeBench writes them (blank lines and trailing newlines included)."""
    if starter_code:
        fmt = f"### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    else:
        fmt = f"### Format: {FORMAT_WITHOUT_STARTER_CODE}\n```python\n# YOUR CODE HERE\n```\n\n"
    return f"### Question:\n{question}\n\n{fmt}{ANSWER_LINE}"


def lcb_messages(question: str, starter_code: str = "") -> tuple[dict[str, str], ...]:
    """The chat messages LiveCodeBench sends: its system message, then the user turn."""
    return ({"role": "system", "content": LCB_SYSTEM_MESSAGE},
            {"role": "user", "content": lcb_user_prompt(question, starter_code)})
