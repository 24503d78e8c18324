"""Small local copies of the built-in benchmarks, each in its hub dataset's own schema.

`write_all(dir)` writes one file (or `save_to_disk` directory) per benchmark, 5-8 rows each, with
gold solutions, and returns {task name: path} for `--data NAME=PATH`. LiveCodeBench's private
tests are stored as the hub stores them: the JSON list, pickled, zlib-compressed, base64-encoded.
`PLANTED` is a MATH-500 problem that the Polaris copy also holds (a planted overlap), and
`NEAR_COPY` a Polaris problem sharing a 13-word run with a GSM8K one.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

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


def _plus_loop(call: str, inputs: list, results: list, *, indent: str = "") -> str:
    return (f"{indent}inputs = {inputs!r}\n{indent}results = {results!r}\n"
            f"{indent}for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
            f"{indent}    assertion({call}(*inp), exp, 0)\n")


MBPP_PLUS = [
    {"task_id": 2, "code": "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))",
     "prompt": "Write a function to find the shared elements from the given two lists.",
     "source_file": "Benchmark Questions Verification V2.ipynb", "test_imports": [],
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"],
     "test": EVALPLUS_HEADER + _plus_loop("similar_elements", [[(3, 4), (4, 5)], [(1,), (2,)]],
                                          [(4,), ()])},
    {"task_id": 3, "code": "def is_not_prime(n):\n    return n < 2 or any(n % d == 0 for d in "
     "range(2, int(n ** 0.5) + 1))",
     "prompt": "Write a python function to identify non-prime numbers.",
     "source_file": "Benchmark Questions Verification V2.ipynb", "test_imports": [],
     "test_list": ["assert is_not_prime(2) == False"],
     "test": EVALPLUS_HEADER + _plus_loop("is_not_prime", [[2], [10], [35], [37], [1]],
                                          [False, True, True, False, True])},
    {"task_id": 4, "code": "import math\ndef area(r):\n    return math.pi * r * r",
     "prompt": "Write a function to find the area of a circle.",
     "source_file": "mbpp.jsonl", "test_imports": ["import math"],
     "test_list": ["assert math.isclose(area(1), 3.141592653589793)"],
     "test": EVALPLUS_HEADER + _plus_loop("area", [[1], [2.5], [0]],
                                          [3.141592653589793, 19.634954084936208, 0.0])},
    {"task_id": 5, "code": "def rev(s):\n    return s[::-1]",
     "prompt": "Write a function to reverse a string.", "source_file": "mbpp.jsonl",
     "test_imports": [], "test_list": ['assert rev("ab") == "ba"'],
     "test": EVALPLUS_HEADER + _plus_loop("rev", [["ab"], [""], ["xyz"]], ["ba", "", "zyx"])},
    {"task_id": 6, "code": "def pair(a):\n    return (a, a)",
     "prompt": "Write a function to return a pair of the argument.", "source_file": "mbpp.jsonl",
     "test_imports": [], "test_list": ["assert pair(1) == (1, 1)"],
     "test": EVALPLUS_HEADER + _plus_loop("pair", [[1], [0]], [(1, 1), (0, 0)])},
]


def _humaneval_plus(i: int, name: str, sig: str, body: str, inputs: list, results: list) -> dict:
    stub = f'def {name}({sig}):\n    """Return the answer for {name}."""\n'
    test = (EVALPLUS_HEADER + "\ndef check(candidate):\n"
            + _plus_loop("candidate", inputs, results, indent="    ") + f"\n\ncheck({name})\n")
    return {"task_id": f"HumanEval/{i}", "prompt": stub, "canonical_solution": body,
            "entry_point": name, "test": test}


HUMANEVAL_PLUS = [
    _humaneval_plus(0, "double", "x", "    return 2 * x\n", [[1], [2], [-3]], [2, 4, -6]),
    _humaneval_plus(1, "halve", "x", "    return x / 2\n", [[1], [3]], [0.5, 1.5]),
    _humaneval_plus(2, "words", "s", "    return s.split()\n", [["a b"], [""]], [["a", "b"], []]),
    _humaneval_plus(3, "is_pos", "x", "    return x > 0\n", [[1], [0], [-1]], [True, False, False]),
    _humaneval_plus(4, "fib", "n", "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, "
                    "a + b\n    return a\n", [[0], [1], [10], [30]], [0, 1, 55, 832040]),
]

DEEPCODER = [  # one config's layout each: primeintellect (list), taco (APPS dict), lcbv5 (LCB)
    {"problem": "Read an integer n and print n * 2.",
     "tests": json.dumps([{"type": "stdin_stdout", "input": "3\n", "output": "6\n"},
                          {"type": "stdin_stdout", "input": "-4\n", "output": "-8\n"}]),
     "starter_code": "", "metadata": json.dumps({"time_limit": "2 seconds"}),
     "solutions": ["print(int(input()) * 2)"]},
    {"problem": "Write a function add(a, b) returning a + b.",
     "tests": json.dumps({"inputs": [[1, 2], [5, 5]], "outputs": [[3], [10]], "fn_name": "add"}),
     "starter_code": "def add(a, b):\n", "metadata": "{}",
     "solutions": ["def add(a, b):\n    return a + b"]},
    {"problem": "Given nums, return their maximum.",
     "tests": json.dumps([{"input": "[1, 5, 2]", "output": "5", "testtype": "functional"},
                          {"input": "[-1]", "output": "-1", "testtype": "functional"}]),
     "starter_code": "class Solution:\n    def maxOf(self, nums: List[int]) -> int:\n",
     "metadata": json.dumps({"func_name": "maxOf"}),
     "solutions": ["class Solution:\n    def maxOf(self, nums):\n        return max(nums)"]},
    {"problem": "Read two integers and print their sum.",
     "tests": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
     "starter_code": "", "metadata": "{}", "solutions": ["print(sum(map(int, input().split())))"]},
    {"problem": "Print hello.", "tests": json.dumps({"inputs": [""], "outputs": ["hello\n"]}),
     "starter_code": "", "metadata": "{}", "solutions": ["print('hello')"]},
]


def encode_private(tests: list[dict]) -> str:
    """LiveCodeBench's storage of private tests: base64(zlib(pickle(json.dumps(tests))))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def _lcb(qid: str, date: str, question: str, public: list, private: list, *,
         starter: str = "", func: str | None = None, plain_private: bool = False) -> dict:
    return {"question_title": f"Problem {qid}", "question_content": question,
            "platform": "leetcode" if func else "atcoder", "question_id": qid,
            "contest_id": f"c{qid}", "contest_date": date, "starter_code": starter,
            "difficulty": "easy", "public_test_cases": json.dumps(public),
            "private_test_cases": json.dumps(private) if plain_private else encode_private(private),
            "metadata": json.dumps({"func_name": func} if func else {})}


def _io(pairs: list[tuple[str, str]], kind: str = "stdin") -> list[dict]:
    return [{"input": i, "output": o, "testtype": kind} for i, o in pairs]


LIVECODEBENCH = [
    _lcb("abc001_a", "2024-09-01T00:00:00", "Read N and print N squared.",
         _io([("3\n", "9\n")]), _io([("12\n", "144\n"), ("0\n", "0\n")])),
    _lcb("abc002_b", "2024-12-15T00:00:00", "Read A and B and print A / B.",
         _io([("1 2\n", "0.5\n")]), _io([("4 2\n", "2.0\n"), ("9 3\n", "3\n")])),
    _lcb("3001", "2025-02-20T00:00:00", "Return the sum of nums.",
         _io([("[1, 2, 3]", "6")], "functional"), _io([("[]", "0"), ("[-5, 5]", "0")],
                                                       "functional"),
         starter="class Solution:\n    def sumOf(self, nums: List[int]) -> int:\n        ",
         func="sumOf"),
    _lcb("3002", "2025-01-05T00:00:00", "Return x times y.",
         _io([("2\n3", "6")], "functional"), _io([("0\n7", "0")], "functional"),
         starter="class Solution:\n    def product(self, x: int, y: int) -> int:\n        ",
         func="product", plain_private=True),
    _lcb("abc000_z", "2024-07-30T00:00:00", "Print the word early.",  # before the window
         _io([("", "early\n")]), _io([("", "early\n")])),
    _lcb("abc999_z", "2025-03-02T00:00:00", "Print the word late.",  # after the window
         _io([("", "late\n")]), _io([("", "late\n")])),
]
LCB_GOLD = {"abc001_a": "n = int(input())\nprint(n * n)",
            "abc002_b": "a, b = map(int, input().split())\nprint(a / b)",
            "3001": "class Solution:\n    def sumOf(self, nums: List[int]) -> int:\n"
                    "        return sum(nums)",
            "3002": "class Solution:\n    def product(self, x, y):\n        return x * y"}

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
