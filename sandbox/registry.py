"""`Registry`: the one name -> value table every part registers its choices in, with one rule.

The rule: a name is registered once (a second registration of a taken name is a ValueError,
`"<what> <name> is already registered"`, unless the caller says `replace=True`: a spec file
re-read), and an unknown name is one line listing the registered ones (`UnknownNameError`, a
KeyError). Losses, aggregations, advantage normalisations, truncation policies and trackers
(trainer/), environments, tool formats, tools, comparison rules (envs/), sandbox backends
(sandbox/) all use it; the config accepts whatever is registered (trainer/config.py checks a name
against the registry, never against a closed list), so registering a new loss is enough to use
it. It lives in the lowest floor so that every part can import it. No values here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """An unknown name; the message lists the registered ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    """Registered values of one kind (`what`: e.g. "loss"), by name."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def add(self, name: str, value: T, *, replace: bool = False) -> T:
        """Register `value` as `name`; ValueError when `name` is empty or taken (unless
        `replace`)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.what} name {name!r} must be a non-empty string")
        if name in self._items and not replace:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._items[name] = value
        return value

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator: register the decorated object under `name`."""
        return lambda value: self.add(name, value, replace=replace)

    decorator = register

    def copy(self) -> Registry[T]:
        """A registry of the same kind holding the same values (tests isolate their changes)."""
        other: Registry[T] = Registry(self.what)
        other._items = dict(self._items)
        return other

    def remove(self, name: str) -> None:
        """Forget `name` (tests that register a throwaway value)."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        return self[name]

    def __getitem__(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(self.unknown(name))
        return self._items[name]

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

    def unknown(self, name: object) -> str:
        """The one-line error for an unknown `name`."""
        return f"unknown {self.what} {name!r}; registered: {', '.join(self.names())}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
