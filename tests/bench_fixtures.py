"""Small local copies of the built-in benchmarks, each in its hub dataset's own schema.

`write_all(dir)` writes one file (or `save_to_disk` directory) per benchmark, 5-9 rows each (MBPP+
and HumanEval+: the 24 and 16 rows of tests/data/evalplus), with gold solutions, and returns
{task name: path} for `--data NAME=PATH`. The DeepCoder and LiveCodeBench rows, with their
near-miss programs, are in tests/bench_code_rows.py.
`PLANTED` is a MATH-500 problem that the Polaris copy also holds (a planted overlap), and
`NEAR_COPY` a Polaris problem sharing a 13-word run with a GSM8K one.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_code_rows import (  # noqa: F401 - re-exported for the tests
    DEEPCODER,
    DEEPCODER_GOLD,
    DEEPCODER_NEAR,
    LCB_GOLD,
    LCB_NEAR,
    LIVECODEBENCH,
    encode_private,
    gold_program,
    near_misses,
)

PLANTED = "What is the smallest positive integer $n$ such that $17n \\equiv 1234 \\pmod{7}?$"
GSM8K_LONG = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
              "clips in May. How many clips did Natalia sell altogether in April and May?")
NEAR_COPY = ("A shop owner: Natalia sold clips to 48 of her friends in April, and then she sold "
             "half as many clips in June. How many in all?")

MATH500 = [
    {"problem": PLANTED, "solution": "$17n \\equiv 3n$, so $3n \\equiv 2$ and $\\boxed{3}$.",
     "answer": "3", "subject": "Number Theory", "level": 2, "unique_id": "test/nt/1.json"},
    {"problem": "Compute $\\frac{1}{2} + \\frac{1}{4}$.", "solution": "It is $\\boxed{\\frac34}$.",
     "answer": "\\frac{3}{4}", "subject": "Prealgebra", "level": 1,
     "unique_id": "test/prealgebra/2.json"},
    {"problem": "What is $2^{10}$?", "solution": "$2^{10} = \\boxed{1024}$.", "answer": "1024",
     "subject": "Algebra", "level": 1, "unique_id": "test/algebra/3.json"},
    {"problem": "Simplify $\\sqrt{12}$.", "solution": "$\\sqrt{12} = \\boxed{2\\sqrt{3}}$.",
     "answer": "2\\sqrt{3}", "subject": "Algebra", "level": 2,
     "unique_id": "test/algebra/4.json"},
    {"problem": "Solve $x + 5 = 12$ for $x$.", "solution": "$x = \\boxed{7}$.", "answer": "7",
     "subject": "Algebra", "level": 1, "unique_id": "test/algebra/5.json"},
]
AIME24 = [{"id": 60 + i, "problem": f"AIME 2024 problem {i}: find the remainder of {p}.",
           "solution": f"The answer is {a}.", "answer": str(a),
           "url": f"https://aops.example/2024_{i}", "year": "2024"}
          for i, (p, a) in enumerate([("7^2 by 1000", 49), ("2^10 by 1000", 24),
                                      ("3^5 by 1000", 243), ("33 by 1000", 33),
                                      ("999 by 1000", 999)])]
AIME25 = [{"id": i, "problem": f"AIME 2025 problem {i}: compute {i} times 11.",
           "answer": str(11 * i), "solution": "", "url": "", "year": "2025"} for i in range(1, 6)]
AMC23 = [{"id": i, "question": f"AMC 2023 problem {i}: what is {i} squared plus one?",
          "answer": float(i * i + 1)} for i in range(1, 6)]
GSM8K = [
    {"question": GSM8K_LONG, "answer": "In May she sold 48/2 = <<48/2=24>>24.\n"
     "Altogether 48+24 = <<48+24=72>>72.\n#### 72"},
    {"question": "Weng earns $12 an hour. Yesterday she worked 50 minutes. How much did she "
     "earn?", "answer": "12/60 = 0.2 per minute; 0.2*50 = 10.\n#### 10"},
    {"question": "A farm has 1,200 hens and buys 400 more. How many hens now?",
     "answer": "1200 + 400 = 1600.\n#### 1,600"},
    {"question": "Tom has 3 boxes of 4 pens. How many pens?", "answer": "3*4=12\n#### 12"},
    {"question": "Sam reads 5 pages a day for 6 days. How many pages?",
     "answer": "5*6 = 30\n#### 30"},
]
POLARIS = [
    {"problem": PLANTED, "answer": "3", "difficulty": "2/8"},
    {"problem": NEAR_COPY, "answer": "96", "difficulty": "5/8"},
    {"problem": "What is $6 \\times 7$?", "answer": "42", "difficulty": "8/8"},
    {"problem": "Find $x$ if $2x = 10$.", "answer": "5", "difficulty": "8/8"},
    {"problem": "Evaluate $\\binom{5}{2}$.", "answer": "10", "difficulty": "7/8"},
]
DEEPSCALER = [{"problem": f"DeepScaleR problem: what is {i} + {i}?", "answer": str(2 * i),
               "solution": f"$\\boxed{{{2 * i}}}$"} for i in range(1, 6)]
DEEPSCALER_ANSWERLESS = [  # as the hub's discussion reports: `answer` empty, no boxed solution
    {"problem": "Let $x$ satisfy $x^2 = 2$. Find the set of all such $x$.", "answer": "",
     "solution": ""},
    {"problem": "Prove that there are infinitely many primes.", "answer": "",
     "solution": "Suppose there are finitely many primes p_1, ..., p_k; then p_1...p_k + 1 has "
                 "a prime factor outside the list, a contradiction."},
]


def deepscaler_rows(n: int, answerless: int) -> list[dict]:
    """`n` DeepScaleR rows (problem, answer, solution), the first `answerless` of them rows the
    hub has without a usable answer, spread through the file."""
    rows = [{"problem": f"DeepScaleR problem {i}: what is {i} times 3?", "answer": str(3 * i),
             "solution": f"It is $\\boxed{{{3 * i}}}$."} for i in range(n - answerless)]
    for k in range(answerless):
        bad = dict(DEEPSCALER_ANSWERLESS[k % 2])
        bad["problem"] += f" (variant {k})"
        rows.insert((k + 1) * len(rows) // (answerless + 1), bad)
    return rows

MBPP_SETUP_ROW = {
    "task_id": 927, "text": "Write a function to calculate the height of the given binary tree.",
    "code": "class Node: \r\n\tdef __init__(self, data): \r\n\t\tself.data = data \r\n"
            "\t\tself.left = None\r\n\t\tself.right = None\r\ndef max_height(node): \r\n"
            "\tif node is None: \r\n\t\treturn 0 ; \r\n\telse : \r\n"
            "\t\tleft_height = max_height(node.left) \r\n"
            "\t\tright_height = max_height(node.right) \r\n"
            "\t\tif (left_height > right_height): \r\n\t\t\treturn left_height+1\r\n"
            "\t\telse: \r\n\t\t\treturn right_height+1",
    "test_list": ["assert (max_height(root)) == 3", "assert (max_height(root1)) == 5 ",
                  "assert (max_height(root2)) == 4"],
    "test_setup_code": "root = Node(1) \r\nroot.left = Node(2) \r\nroot.right = Node(3) \r\n"
                       "root.left.left = Node(4) \r\nroot.left.right = Node(5) \r\n"
                       "root1 = Node(1);  \r\nroot1.left = Node(2);  \r\n"
                       "root1.right = Node(3);  \r\nroot1.left.left = Node(4);  \r\n"
                       "root1.right.left = Node(5);  \r\nroot1.right.right = Node(6);  \r\n"
                       "root1.right.right.right= Node(7);  \r\n"
                       "root1.right.right.right.right = Node(8)\r\nroot2 = Node(1) \r\n"
                       "root2.left = Node(2) \r\nroot2.right = Node(3) \r\n"
                       "root2.left.left = Node(4) \r\nroot2.left.right = Node(5)\r\n"
                       "root2.left.left.left = Node(6)\r\nroot2.left.left.right = Node(7)",
    "challenge_test_list": []}
"""MBPP's setup-code problem (train split, task 927): `test_setup_code` builds the trees with the
candidate's own `Node` class, so it runs after the candidate's code."""

MBPP = [
    {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a "
     "given character from the string.",
     "code": "def remove_Occ(s,ch):\n    i = s.find(ch)\n    if i >= 0:\n        s = s[:i] + "
     "s[i+1:]\n    j = s.rfind(ch)\n    if j >= 0:\n        s = s[:j] + s[j+1:]\n    return s",
     "test_list": ['assert remove_Occ("hello","l") == "heo"',
                   'assert remove_Occ("abcda","a") == "bcd"',
                   'assert remove_Occ("PHP","P") == "H"'],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 12, "text": "Write a function to find the shared elements from the given two "
     "lists.", "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                   "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 13, "text": "Write a function to compute the square root of a number.",
     "code": "def root(x):\n    return math.sqrt(x)",
     "test_list": ["assert math.isclose(root(16), 4.0)", "assert math.isclose(root(2), 1.41421356, "
                   "rel_tol=1e-6)"],
     "test_setup_code": "import math", "challenge_test_list": []},
    {"task_id": 14, "text": "Write a python function to find the volume of a triangular prism.",
     "code": "def find_Volume(l,b,h):\n    return ((l * b * h) / 2)",
     "test_list": ["assert find_Volume(10,8,6) == 240", "assert find_Volume(3,2,2) == 6"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 15, "text": "Write a function to check if a number is even.",
     "code": "def is_even(n):\n    return n % 2 == 0",
     "test_list": ["assert is_even(4)", "assert not is_even(7)", "assert is_even(0) == True"],
     "test_setup_code": "", "challenge_test_list": []},
    MBPP_SETUP_ROW,
]

EVALPLUS_HEADER = '''import numpy as np

def is_floats(x) -> bool:
    # check if it is float; List[float]; Tuple[float]
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


def assertion(out, exp, atol):
    exact_match = out == exp

    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        np.testing.assert_allclose(out, exp, atol=atol)
    else:
        assert exact_match

'''


EVALPLUS_ROWS = Path(__file__).parent / "data" / "evalplus"
"""MBPP+ and HumanEval+ rows in the hub's schema and `test` layout, every EvalPlus helper variant
(tests/data/evalplus/make_rows.py says how they were made)."""
MBPP_PLUS = [json.loads(x) for x in (EVALPLUS_ROWS / "mbppplus.jsonl").read_text().splitlines()]
HUMANEVAL_PLUS = [json.loads(x)
                  for x in (EVALPLUS_ROWS / "humanevalplus.jsonl").read_text().splitlines()]



ROWS = {"math500": MATH500, "aime24": AIME24, "aime25": AIME25, "amc23": AMC23, "gsm8k": GSM8K,
        "polaris": POLARIS, "deepscaler": DEEPSCALER, "mbpp": MBPP, "mbpp+": MBPP_PLUS,
        "humaneval+": HUMANEVAL_PLUS, "deepcoder": DEEPCODER, "livecodebench": LIVECODEBENCH}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_all(folder: Path) -> dict[str, str]:
    """Every fixture under `folder`: gsm8k as parquet, aime25 as a save_to_disk directory, the
    rest as JSON lines; {task name: path}."""
    import datasets

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, rows in ROWS.items():
        safe = name.replace("+", "plus")
        if name == "gsm8k":
            path = folder / f"{safe}.parquet"
            datasets.Dataset.from_list(rows).to_parquet(str(path))
        elif name == "aime25":
            path = folder / safe
            datasets.Dataset.from_list(rows).save_to_disk(str(path))
        else:
            path = write_jsonl(folder / f"{safe}.jsonl", rows)
        out[name] = str(path)
    return out
