"""Small local copies of the built-in benchmarks, each in its hub dataset's own schema.

`write_all(dir)` writes one file (or `save_to_disk` directory) per benchmark, 5-9 rows each, with
gold solutions, and returns {task name: path} for `--data NAME=PATH`. The code training and
benchmark rows carry the awkward cases of the real ones (DeepCoder: every config's layout,
PrimeIntellect's wrapped function_call results and fenced solutions, TACO's fn_name rows;
LiveCodeBench: 10^18-sized answers, a functional row, an order-sensitive multi-line answer) and
near-miss programs (`near_misses`: off by one on big numbers, a float where an integer is due, a
float rounded, wrong order or case) that must never score correct. LiveCodeBench's private
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

PI_STDIN = ("Solve the following coding problem using the programming language python:\n\n"
            "{body}\n\nThe input will be stdin and you should print your solution to stdout"
            "\n\n\nNow solve the problem and return the code.")
PI_CALL = ("Solve the following coding problem using the programming language python:\n\n"
           "{body}\n\nThe input will be given as arguments to the function and the output "
           "should be its return value.\n\nNow solve the problem and return the code.")
BIG = 10**18


def _pi(kind: str, pairs: list, fn: str | None = None) -> str:
    """PrimeIntellect's `verification_info.test_cases`, as DeepCoder's primeintellect config
    stores them: function_call results wrapped in a list."""
    if kind == "function_call":
        return json.dumps([{"type": kind, "fn_name": fn, "input": i, "output": [o]}
                           for i, o in pairs])
    return json.dumps([{"type": kind, "input": i, "output": o} for i, o in pairs])


DEEPCODER = [  # every config's layout (train splits): primeintellect, taco, lcbv5
    {"problem": PI_STDIN.format(body="You are given N integers A_1, ..., A_N "
                                "(|A_i| <= 10^18). Print their sum.\n\n-----Input-----\nN\n"
                                "A_1 A_2 ... A_N\n\n-----Output-----\nThe sum."),
     "tests": _pi("stdin_stdout", [("3\n1 2 3\n", "6\n"),
                                   (f"2\n{BIG} {BIG}\n", f"{2 * BIG}\n"),
                                   (f"3\n{BIG - 1} {BIG - 3} {BIG + 7}\n", f"{3 * BIG + 3}\n"),
                                   ("1\n-5\n", "-5\n"), (f"2\n{-BIG} 1\n", f"{1 - BIG}\n")]),
     "starter_code": "", "metadata": "{}",
     "solutions": ["```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"]},
    {"problem": PI_CALL.format(body="Write a function `sort_words(words)` that returns the words "
                               "sorted by length, shortest first, ties in alphabetical order."),
     "tests": _pi("function_call", [([["bb", "a", "ccc"]], ["a", "bb", "ccc"]),
                                    ([["yy", "xx", "z"]], ["z", "xx", "yy"]),
                                    ([[]], []), ([["same"]], ["same"]),
                                    ([["dd", "c", "bbb", "a"]], ["a", "c", "dd", "bbb"])],
                  fn="sort_words"),
     "starter_code": "", "metadata": "{}",
     "solutions": ["```python\ndef sort_words(words):\n    return sorted(words, key=lambda w: "
                   "(len(w), w))\n```"]},
    {"problem": PI_CALL.format(body="Write a function `mul_mod_free(a, b)` returning the exact "
                               "product a * b (up to 10^18)."),
     "tests": _pi("function_call", [([2, 3], 6), ([10**9 + 7, 10**9 + 9],
                                                  (10**9 + 7) * (10**9 + 9)),
                                    ([BIG, 1], BIG), ([0, 5], 0), ([999999999, 999999999],
                                                                   999999999**2)],
                  fn="mul_mod_free"),
     "starter_code": "", "metadata": "{}",
     "solutions": ["```python\ndef mul_mod_free(a, b):\n    return a * b\n```"]},
    {"problem": "Given N numbers, print their mean with an absolute or relative error of at "
                "most 1e-6.\n\nInput: N on the first line, then the N numbers.",
     "tests": json.dumps({"inputs": ["3\n1 2 3\n", "3\n1 1 2\n", "2\n0 1\n", "1\n7\n",
                                     "3\n1 2 2\n"],
                          "outputs": ["2.0\n", "1.3333333333\n", "0.5\n", "7\n",
                                      "1.6666666667\n"]}),
     "starter_code": "", "metadata": "{}",
     "solutions": ["n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)",
                   "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])) / "
                   "int(d[0]))"]},
    {"problem": "Given T numbers, print YES for each prime one and NO for each other one, one "
                "answer per line.",
     "tests": json.dumps({"inputs": ["3\n2\n4\n9\n", "2\n1\n97\n", "1\n91\n", "1\n2\n",
                                     "2\n25\n23\n"],
                          "outputs": ["YES\nNO\nNO\n", "NO\nYES\n", "NO\n", "YES\n",
                                      "NO\nYES\n"]}),
     "starter_code": "", "metadata": "{}",
     "solutions": ["t = int(input())\nfor _ in range(t):\n    n = int(input())\n    print('YES' "
                   "if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO')"]},
    {"problem": "An anagram is the result of rearranging the letters of a word. Write a function "
                "is_anagram(test, original) that says whether test is an anagram of original, "
                "ignoring case.",
     "tests": json.dumps({"fn_name": "is_anagram",
                          "inputs": [["foefet", "toffee"], ["Buckethead", "DeathCubeK"],
                                     ["Twoo", "WooT"], ["dumble", "bumble"], ["ound", "round"],
                                     ["apple", "pale"]],
                          "outputs": [[True], [True], [True], [False], [False], [False]]}),
     "starter_code": "", "metadata": "{}",
     "solutions": ["def is_anagram(test, original):\n    return sorted(test.lower()) == "
                   "sorted(original.lower())"]},
    {"problem": "Write a function pairs_desc(xs) returning the (value, index) pairs of xs sorted "
                "by value, largest first.",
     "tests": json.dumps({"fn_name": "pairs_desc",
                          "inputs": [[[3, 1, 2]], [[5]], [[1, 9]], [[2, 7, 4]], [[0, -1]]],
                          "outputs": [[[[3, 0], [2, 2], [1, 1]]], [[[5, 0]]], [[[9, 1], [1, 0]]],
                                      [[[7, 1], [4, 2], [2, 0]]], [[[0, 0], [-1, 1]]]]}),
     "starter_code": "", "metadata": "{}",
     "solutions": ["def pairs_desc(xs):\n    return sorted(((x, i) for i, x in enumerate(xs)), "
                   "reverse=True)"]},
    {"problem": "You are given N and M. Print N * M (1 <= N, M <= 10^18).",
     "tests": json.dumps([{"input": "2 3\n", "output": "6\n", "testtype": "stdin"},
                          {"input": f"{BIG} {BIG - 1}\n", "output": f"{BIG * (BIG - 1)}\n",
                           "testtype": "stdin"},
                          {"input": f"{10**9 + 7} {10**9 + 9}\n",
                           "output": f"{(10**9 + 7) * (10**9 + 9)}\n", "testtype": "stdin"}]),
     "starter_code": "", "metadata": "{}", "solutions": []},
    {"problem": "Given nums, return their maximum.",
     "tests": json.dumps([{"input": "[1, 5, 2]", "output": "5", "testtype": "functional"},
                          {"input": "[-1]", "output": "-1", "testtype": "functional"},
                          {"input": f"[{BIG + 1}, {BIG}]", "output": str(BIG + 1),
                           "testtype": "functional"}]),
     "starter_code": "class Solution:\n    def maxOf(self, nums: List[int]) -> int:\n        ",
     "metadata": json.dumps({"func_name": "maxOf"}), "solutions": []},
]
DEEPCODER_GOLD = {
    "You are given N and M. Print N * M (1 <= N, M <= 10^18).":
        "n, m = map(int, input().split())\nprint(n * m)",
    "Given nums, return their maximum.":
        "class Solution:\n    def maxOf(self, nums):\n        return max(nums)",
}
"""Reference solutions of the rows that carry none (lcbv5 rows, as LiveCodeBench's), by problem."""
DEEPCODER_NEAR = {  # by the problem's first words; programs wrong by a small margin
    "Solve the following coding problem using the programming language python:\n\nYou are":
        ["n = int(input())\ns = sum(map(int, input().split()))\nprint(s - (abs(s) > 10**9))",
         "n = int(input())\nprint(int(sum(map(float, input().split()))))"],  # float sum
    "Solve the following coding problem using the programming language python:\n\nWrite a "
    "function `sort_words":
        ["def sort_words(words):\n    return sorted(words, key=lambda w: (len(w), w), "
         "reverse=True)",  # wrong order
         "def sort_words(words):\n    return sorted(words, key=len)"],  # ties unordered
    "Solve the following coding problem using the programming language python:\n\nWrite a "
    "function `mul_mod_free":
        ["def mul_mod_free(a, b):\n    return float(a) * b",  # a float near the integer
         "def mul_mod_free(a, b):\n    return int(float(a) * b)"],  # float-rounded integer
    "Given N numbers, print their mean":
        ["n = int(input())\nxs = list(map(int, input().split()))\nprint(round(sum(xs) / n, 2))",
         "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) // n)"],
    "Given T numbers, print YES": [  # TACO's own checker takes any word for any other
        "t = int(input())\nfor _ in range(t):\n    n = int(input())\n    print('YES' if "
        "all(n % d for d in range(2, n)) else 'NO')",  # 1 is not prime
        "t = int(input())\nfor _ in range(t):\n    n = int(input())\n    print('YES' if n % 2 "
        "else 'NO')"],
    "An anagram is": ["def is_anagram(test, original):\n    return sorted(test) == "
                      "sorted(original)"],  # case matters where it must not
    "Write a function pairs_desc": [
        "def pairs_desc(xs):\n    return sorted((x, i) for i, x in enumerate(xs))",  # order
        "def pairs_desc(xs):\n    return sorted(((i, x) for i, x in enumerate(xs)), "
        "key=lambda p: -p[1])"],  # swapped pairs
    "You are given N and M": ["n, m = map(int, input().split())\nprint(n * m - 1)",
                              "n, m = map(int, input().split())\nprint(int(float(n) * m))"],
    "Given nums, return their maximum.": [
        "class Solution:\n    def maxOf(self, nums):\n        return float(max(nums))",
        "class Solution:\n    def maxOf(self, nums):\n        return max(nums) - 1"],
}


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
    _lcb("abc001_a", "2024-09-01T00:00:00", "Read N (1 <= N <= 10^9) and print N squared.",
         _io([("3\n", "9\n")]), _io([("12\n", "144\n"), ("0\n", "0\n"),
                                     ("999999999\n", "999999998000000001\n")])),
    _lcb("abc002_b", "2024-12-15T00:00:00", "Read A and B and print A / B.",
         _io([("1 2\n", "0.5\n")]), _io([("4 2\n", "2.0\n"), ("9 3\n", "3\n"),
                                          ("1 3\n", "0.3333333333333333\n")])),
    _lcb("abc003_c", "2024-10-05T12:00:00", "Read A and B (|A|, |B| <= 10^18) and print A + B.",
         _io([("1 2\n", "3\n")]), _io([(f"{BIG} {BIG}\n", f"{2 * BIG}\n"),
                                        (f"{BIG - 1} 2\n", f"{BIG + 1}\n"),
                                        (f"{-BIG} {BIG}\n", "0\n")])),
    _lcb("abc004_d", "2025-02-01T00:00:00", "Read N and N integers; print them in ascending "
         "order, one per line, then Yes if they were already sorted, else No.",
         _io([("3\n3 1 2\n", "1\n2\n3\nNo\n")]),
         _io([("2\n1 2\n", "1\n2\nYes\n"), ("4\n4 3 2 1\n", "1\n2\n3\n4\nNo\n")])),
    _lcb("3001", "2025-02-20T00:00:00", "Return the sum of nums.",
         _io([("[1, 2, 3]", "6")], "functional"), _io([("[]", "0"), ("[-5, 5]", "0"),
                                                       (f"[{BIG}, 1]", str(BIG + 1))],
                                                       "functional"),
         starter="class Solution:\n    def sumOf(self, nums: List[int]) -> int:\n        ",
         func="sumOf"),
    _lcb("3002", "2025-01-05T00:00:00", "Return x times y.",
         _io([("2\n3", "6")], "functional"),
         _io([("0\n7", "0"), ("1000000007\n1000000009", str((10**9 + 7) * (10**9 + 9)))],
             "functional"),
         starter="class Solution:\n    def product(self, x: int, y: int) -> int:\n        ",
         func="product", plain_private=True),
    _lcb("abc000_z", "2024-07-30T00:00:00", "Print the word early.",  # before the window
         _io([("", "early\n")]), _io([("", "early\n")])),
    _lcb("abc999_z", "2025-03-02T00:00:00", "Print the word late.",  # after the window
         _io([("", "late\n")]), _io([("", "late\n")])),
    _lcb("abc998_y", "2025-02-28T09:30:00", "Print the word edge.",  # last day, after midnight
         _io([("", "edge\n")]), _io([("", "edge\n")])),
]
LCB_GOLD = {"abc001_a": "n = int(input())\nprint(n * n)",
            "abc002_b": "a, b = map(int, input().split())\nprint(a / b)",
            "abc003_c": "a, b = map(int, input().split())\nprint(a + b)",
            "abc004_d": "n = int(input())\nxs = list(map(int, input().split()))\n"
                        "print(*sorted(xs), sep='\\n')\nprint('Yes' if xs == sorted(xs) else 'No')",
            "3001": "class Solution:\n    def sumOf(self, nums: List[int]) -> int:\n"
                    "        return sum(nums)",
            "3002": "class Solution:\n    def product(self, x, y):\n        return x * y",
            "abc000_z": "print('early')", "abc999_z": "print('late')", "abc998_y": "print('edge')"}
LCB_NEAR = {  # programs wrong by a small margin: none may score correct
    "abc001_a": ["n = int(input())\nprint(int(float(n) ** 2))",  # float-rounded big square
                 "n = int(input())\nprint(n * n + (n > 10**6))"],  # off by one on big ones
    "abc002_b": ["a, b = map(int, input().split())\nprint(round(a / b, 2))",  # a float rounded
                 "a, b = map(int, input().split())\nprint(f'{a / b:.6f}')"],
    "abc003_c": ["a, b = map(int, input().split())\nprint(a + b - (abs(a) > 10**9))",
                 "a, b = map(int, input().split())\nprint(int(float(a) + float(b)))"],
    "abc004_d": ["n = int(input())\nxs = list(map(int, input().split()))\n"  # wrong order
                 "print(*sorted(xs, reverse=True), sep='\\n')\n"
                 "print('Yes' if xs == sorted(xs) else 'No')",
                 "n = int(input())\nxs = list(map(int, input().split()))\n"  # wrong case
                 "print(*sorted(xs), sep='\\n')\nprint('YES' if xs == sorted(xs) else 'NO')",
                 "n = int(input())\nxs = list(map(int, input().split()))\n"  # one line
                 "print(*sorted(xs))\nprint('Yes' if xs == sorted(xs) else 'No')"],
    "3001": ["class Solution:\n    def sumOf(self, nums):\n        return float(sum(nums))",
             "class Solution:\n    def sumOf(self, nums):\n"
             "        return sum(nums) - (max(nums, default=0) > 10**9)"],
    "3002": ["class Solution:\n    def product(self, x, y):\n        return float(x) * y",
             "class Solution:\n    def product(self, x, y):\n        return int(float(x) * y)"],
    "abc000_z": ["print('Early')"], "abc999_z": ["print('late.')"], "abc998_y": ["print('edg')"],
}

def gold_program(sample) -> str:
    """A code sample's reference solution, fenced: the row's own, else the table's."""
    if sample.meta.get("solution"):
        return sample.meta["solution"]
    table = LCB_GOLD if sample.task.startswith("livecodebench") else DEEPCODER_GOLD
    return f"```python\n{table.get(sample.id) or table[sample.meta['problem']]}\n```"


def near_misses(sample) -> list[str]:
    """The near-miss programs of a LiveCodeBench or DeepCoder sample (not fenced)."""
    if sample.task.startswith("livecodebench"):
        return LCB_NEAR[sample.id]
    (programs,) = [v for k, v in DEEPCODER_NEAR.items() if sample.meta["problem"].startswith(k)]
    return programs


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
