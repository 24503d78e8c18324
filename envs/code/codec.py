"""The tagged strict-JSON codec of values crossing the sandbox boundary; stdlib only.

`encode` runs in the candidate's process (inside the sandbox, loaded by harness.py from its file
before any candidate code); `decode` runs where values are compared: the trusted check process
and the parent (envs/code/plan.py). JSON's own types cross as themselves; tuples, sets,
frozensets, dicts (any keys), integers past BIG_INT_BITS (in hex), inf/nan, complex, bytes,
Counter, OrderedDict, defaultdict, deque, range and namedtuples are tagged and decoded into the
same types, so `==` on the trusted side is the `==` the reference harnesses run in-process.
A value of any other type (a regex match, a generator, an object of the candidate's class)
arrives as an `Opaque`: equal only to itself, with its truth value. A subclass of any of these
types (always-equal tricks) and nesting past MAX_DEPTH are refused (NotPlain). Decoding builds
only these exact types, so nothing from the candidate's process ever runs on the trusted side.
"""

import math
from collections import Counter, OrderedDict, defaultdict, deque

# Captured before any candidate code can patch builtins or modules.
_type, _len, _repr, _str, _isfinite = type, len, repr, str, math.isfinite
_bit_length, _hex, _items = int.bit_length, int.__format__, dict.items
_tuple_eq, _tuple_hash, _tuple_iter = tuple.__eq__, tuple.__hash__, tuple.__iter__
MAX_DEPTH = 100
BIG_INT_BITS = 12000
"""Integers longer than this (about 3,600 digits, under Python's 4,300-digit int->str limit)
cross in hex, which that limit does not cover."""
_ESCAPES = {i: f"\\u{i:04x}" for i in range(32)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})
_FACTORIES = {f: f.__name__ for f in (list, dict, set, frozenset, tuple, int, float, str, bool,
                                      complex, bytes, Counter, OrderedDict, deque)}
"""defaultdict factories that cross by name (any other factory arrives as None: equality
ignores it)."""
_PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, Counter,
          OrderedDict, defaultdict, deque, range)


class NotPlain(ValueError):
    """A value the codec refuses: a subclass of a builtin type, or nesting past MAX_DEPTH."""


class Opaque:
    """A value of a type the codec does not carry (a regex match, a generator, an object of the
    candidate's own class): equal only to itself, with the truth value it had."""

    __slots__ = ("kind", "truth")

    def __init__(self, kind, truth):
        self.kind, self.truth = kind, truth

    def __bool__(self):
        return self.truth

    def __repr__(self):
        return "<" + self.kind + " object>"


def _list(values, depth):
    return "[" + ",".join([encode(v, depth + 1) for v in values]) + "]"


def _seq(tag, values, depth):
    return '{"' + tag + '":' + _list(values, depth) + "}"


def _pairs(tag, x, depth):
    pairs = ["[" + encode(k, depth + 1) + "," + encode(v, depth + 1) + "]"
             for k, v in _items(x)]
    return '{"' + tag + '":[' + ",".join(pairs) + "]}"


def encode(x, depth=0):
    """Strict JSON text of a value; JSON's own types as themselves, the rest tagged."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    t = _type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        if _bit_length(x) > BIG_INT_BITS:
            return '{"int":"' + _hex(x, "x") + '"}'
        return int.__repr__(x)
    if t is float:
        return float.__repr__(x) if _isfinite(x) else '{"float":"' + float.__repr__(x) + '"}'
    if t is str:
        return '"' + str.translate(x, _ESCAPES) + '"'
    if t is list:
        return _list(x, depth)
    if t is tuple:
        return _seq("tuple", x, depth)
    if t is dict:
        return _pairs("dict", x, depth)
    if t is set or t is frozenset:
        return _seq(t.__name__, x, depth)
    return _encode_other(x, t, depth)


def _encode_other(x, t, depth):
    if t is complex:
        return _seq("complex", (x.real, x.imag), depth)
    if t is bytes:
        return '{"bytes":"' + bytes.hex(x) + '"}'
    if t is Counter or t is OrderedDict:
        return _pairs(t.__name__, x, depth)
    if t is defaultdict:
        name = _FACTORIES.get(x.default_factory)
        return '{"defaultdict":[' + encode(name) + "," + _pairs("dict", x, depth) + "]}"
    if t is deque:
        return '{"deque":[' + encode(x.maxlen) + "," + _list(x, depth) + "]}"
    if t is range:
        return _seq("range", (x.start, x.stop, x.step), depth)
    if _is_namedtuple(t):
        head = encode(t.__name__) + "," + _list(t._fields, depth)
        return '{"namedtuple":[' + head + "," + _list(_tuple_iter(x), depth) + "]}"
    if any(issubclass(t, p) for p in _PLAIN):
        raise NotPlain("value of type " + t.__name__)
    return '{"object":[' + encode(t.__name__) + "," + encode(bool(x)) + "]}"


def _is_namedtuple(t):
    fields = getattr(t, "_fields", None)
    return (tuple in t.__mro__ and _type(fields) is tuple
            and all(_type(f) is str for f in fields)
            and t.__eq__ is _tuple_eq and t.__hash__ is _tuple_hash)


def _namedtuple_class(name, fields, cache={}):  # noqa: B006 - one cache per process
    key = (name, tuple(fields))
    if key not in cache:
        from collections import namedtuple

        cache[key] = namedtuple(name, fields)  # ValueError on names that are not identifiers
    return cache[key]


def _mapping(x):
    value = decode(x)
    if _type(value) is not dict:
        raise NotPlain("malformed defaultdict")
    return value


def _decode_pairs(items):
    if not all(_type(kv) is list and _len(kv) == 2 for kv in items):
        raise NotPlain("malformed mapping")
    return [(decode(k), decode(v)) for k, v in items]


_DECODERS = {
    "tuple": lambda v: tuple(decode(x) for x in v),
    "set": lambda v: {decode(x) for x in v},
    "frozenset": lambda v: frozenset(decode(x) for x in v),
    "dict": lambda v: dict(_decode_pairs(v)),
    "Counter": lambda v: Counter(dict(_decode_pairs(v))),
    "OrderedDict": lambda v: OrderedDict(_decode_pairs(v)),
    "int": lambda v: int(v, 16),
    "float": lambda v: {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v],
    "complex": lambda v: complex(*[float(decode(x)) for x in v]),
    "bytes": bytes.fromhex,
    "range": lambda v: range(*[int(decode(x)) for x in v]),
    "defaultdict": lambda v: defaultdict(_FACTORY_BY_NAME[v[0]] if v[0] else None,
                                         _mapping(v[1])),
    "deque": lambda v: deque(decode(v[1]), v[0]),
    "namedtuple": lambda v: _namedtuple_class(v[0], v[1])(*decode(v[2])),
    "object": lambda v: Opaque(_str(v[0]), v[1] is True),
}
_FACTORY_BY_NAME = {name: f for f, name in _FACTORIES.items()}
_TYPES = {"int": str, "float": str, "bytes": str}


def decode(x):
    """Tagged JSON (as `encode` writes it) -> the value, in the same types; NotPlain (a
    ValueError) on anything malformed."""
    t = _type(x)
    if t is list:
        return [decode(v) for v in x]
    if t is not dict:
        return x
    if _len(x) != 1:
        raise NotPlain("malformed tagged value")
    (tag, items), = x.items()
    if tag not in _DECODERS or _type(items) is not _TYPES.get(tag, list):
        raise NotPlain("unknown tag " + _repr(tag))
    try:
        return _DECODERS[tag](items)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise NotPlain("malformed " + tag + ": " + _str(e)[:100]) from None
