"""The code rows of the benchmark fixtures (tests/bench_fixtures.py): DeepCoder and LiveCodeBench.

Each row is in its hub dataset's schema with the awkward cases of the real ones: DeepCoder's
three configs (PrimeIntellect's stdin_stdout and function_call tests, results wrapped in a list,
solutions already fenced; TACO's {inputs, outputs[, fn_name]} with plain-code solutions; lcbv5's
LiveCodeBench tests with the function name in `metadata` and no solutions), LiveCodeBench's
private tests stored as the hub stores them (pickled, zlib-compressed, base64-encoded), answers
of 10^18 and more, a functional row, an order-sensitive multi-line answer, contest dates around
a window's ends. `*_GOLD` are reference solutions for rows without one; `*_NEAR` are programs
wrong by a small margin (off by one on big numbers, a float where an integer is due, a float
rounded, wrong order, case or line layout) that must never score correct.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib

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
