"""The value codec across the sandbox boundary (envs/code/codec.py): what MBPP and HumanEval+
reference solutions return (Counter, defaultdict, OrderedDict, namedtuple, deque, big ints,
inf/nan, complex, regex matches) arrives as the same types, so `==` on the trusted side is the
in-process `==` of the reference harnesses; hostile values stay refused. In-process round trips,
then real sandbox runs (bwrap) in both the `call` and the two-process `check` mode."""

from __future__ import annotations

import json
import math
import os
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

import pytest

from scalerl.envs.code.codec import NotPlain, Opaque, decode, encode
from scalerl.envs.code.verifier import score_code
from scalerl.sandbox import SandboxConfig, available_backends

Point = namedtuple("Point", "x y")
VALUES = [
    Counter("abracadabra"), defaultdict(list, {1: [2]}), OrderedDict([("b", 1), ("a", 2)]),
    Point(1, 2.5), deque([1, (2, 3)], maxlen=5), 7 ** 6000, -(3 ** 9000), math.inf, -math.inf,
    complex(1.5, -2), b"\x00\xff", range(2, 11, 3), frozenset({1, 2}), {(1, 2): {3}},
    [None, True, 1, 1.5, "x\n\"", (), set()],
]


def roundtrip(value):
    text = encode(value)
    return decode(json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {text}")))


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_come_back_in_their_own_type_and_equal(value):
    back = roundtrip(value)
    assert back == value
    if isinstance(value, Point):  # a namedtuple class of the same name and fields
        assert (type(back).__name__, back._fields, back.y) == ("Point", ("x", "y"), 2.5)
    else:
        assert type(back) is type(value)
    if isinstance(value, defaultdict):
        assert back.default_factory is list and back[5] == []
    if isinstance(value, deque):
        assert back.maxlen == 5


def test_equality_is_the_in_process_one():
    assert roundtrip(OrderedDict([("a", 2), ("b", 1)])) != OrderedDict([("b", 1), ("a", 2)])
    assert roundtrip(OrderedDict([("a", 2), ("b", 1)])) == {"b": 1, "a": 2}
    assert roundtrip(deque([1, 2])) != [1, 2]
    assert roundtrip(Point(1, 2)) == (1, 2)
    assert roundtrip(Counter({"a": 1})) == {"a": 1}
    nan = roundtrip(math.nan)
    assert math.isnan(nan) and nan != nan
    assert roundtrip(defaultdict(lambda: 0, {1: 2})) == {1: 2}  # a lambda factory: not carried


def test_other_types_arrive_opaque_equal_only_to_themselves():
    import re

    match = roundtrip(re.match("a", "abc"))
    assert isinstance(match, Opaque) and match and match != match.kind
    assert match is not None and not isinstance(match, bool)  # what MBPP+'s not-None oracle asks
    assert not roundtrip(type("Empty", (), {"__bool__": lambda s: False})())


@pytest.mark.parametrize("value, message", [
    (type("C", (Counter,), {"__eq__": lambda s, o: True})(), "value of type C"),
    (type("T", (tuple,), {"_fields": ("a",), "__eq__": lambda s, o: True})((1,)),
     "value of type T"),
    (type("I", (int,), {})(3), "value of type I"),
    (type("D", (OrderedDict,), {})(), "value of type D"),
])
def test_subclasses_are_refused(value, message):
    with pytest.raises(NotPlain, match=message):
        encode(value)


def test_deep_nesting_is_refused():
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(NotPlain, match="nested too deep"):
        encode(deep)


@pytest.mark.parametrize("bad", [
    {"namedtuple": ["X", ["__class__"], [1]]}, {"namedtuple": ["X", ["a"], [1, 2]]},
    {"int": "0xzz"}, {"float": "1e5"}, {"object": [1]}, {"Counter": [[1]]}, {"list": []},
    {"set": [[1]]}, {"dict": [[[1], 2]]}, {"deque": [-1, []]}, {"bytes": "z"}, {"tuple": 3},
    {"defaultdict": ["open", {"dict": []}]}, {"range": [1, 2, 0]},
])
def test_malformed_tags_are_refused(bad):
    with pytest.raises(ValueError):
        decode(bad)


# --- through the sandbox -----------------------------------------------------------------
@pytest.fixture(scope="module")
def bwrap():
    ok, why = available_backends()["bwrap"]
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bwrap unavailable in CI: {why}")
        pytest.skip(f"bwrap unavailable: {why}")
    return SandboxConfig("bwrap")


PROGRAM = '''
import collections, re
P = collections.namedtuple("P", "x y")
def f(k):
    return [collections.Counter("aab"), collections.defaultdict(int, {"a": 1}),
            collections.OrderedDict([("b", 1), ("a", 2)]), P(1, 2), collections.deque([1]),
            10 ** 5000 + 1, float("inf"), complex(0, 1), re.search("b", "abc")][k]
'''
CHECK = '''
def check(candidate):
    from collections import Counter, OrderedDict, defaultdict, deque
    assert type(candidate(0)) is Counter and candidate(0) == {"a": 2, "b": 1}
    assert type(candidate(1)) is defaultdict and candidate(1)["zz"] == 0
    assert candidate(2) == OrderedDict([("b", 1), ("a", 2)])
    assert candidate(2) != OrderedDict([("a", 2), ("b", 1)])
    assert candidate(3) == (1, 2) and candidate(3).y == 2
    assert candidate(4) == deque([1]) and candidate(4) != [1]
    assert candidate(5) == 10 ** 5000 + 1 and candidate(5) != 10 ** 5000
    assert candidate(6) == float("inf") and candidate(7) == 1j
    assert candidate(8) is not None and not isinstance(candidate(8), bool)
'''
LITERAL = {"type": "assert", "entry_point": "f", "test": (
    "def check(candidate):\n    assert candidate(0) == {'a': 2, 'b': 1}\n"
    "    assert candidate(1) == {'a': 1}\n    assert candidate(3) == (1, 2)\n"
    "    assert candidate(6) == 1e999\n    assert candidate(8)\n")}


def test_check_mode_compares_the_real_types(bwrap):
    tests = {"type": "assert", "entry_point": "f", "test": CHECK}
    s = score_code(f"```python\n{PROGRAM}\n```", tests, sandbox=bwrap)
    assert s.status == "correct", s


def test_literal_asserts_compare_the_real_types_in_the_parent(bwrap):
    s = score_code(f"```python\n{PROGRAM}\n```", LITERAL, sandbox=bwrap)
    assert s.status == "correct", s
    wrong = PROGRAM.replace('collections.Counter("aab")', 'collections.Counter("abb")')
    assert score_code(f"```python\n{wrong}\n```", LITERAL, sandbox=bwrap).status == "wrong"


@pytest.mark.parametrize("hostile, why", [
    ("import collections\nclass C(collections.Counter):\n    __eq__ = lambda s, o: True\n"
     "def f(k):\n    return C()", "value of type C"),
    ("class A:\n    __eq__ = lambda s, o: True\ndef f(k):\n    return A()", "got <A object>"),
    ("def f(k):\n    x = []\n    for _ in range(500):\n        x = [x]\n    return x",
     "nested too deep"),
])
def test_hostile_values_are_refused_or_equal_nothing(hostile, why, bwrap):
    for tests in (LITERAL, {"type": "assert", "entry_point": "f", "test": CHECK}):
        s = score_code(f"```python\n{hostile}\n```", tests, sandbox=bwrap)
        assert s.status == "wrong", s
    s = score_code(f"```python\n{hostile}\n```", LITERAL, sandbox=bwrap)
    assert why in s.detail, s


def test_literal_tests_are_call_tests():
    from scalerl.envs.code.plan import plan_tests

    assert plan_tests(LITERAL, timeout_s=1.0, float_tol=None).spec["mode"] == "call"
