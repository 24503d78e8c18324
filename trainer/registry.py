"""`Registry`: a name -> value table for the trainer's choices (losses, aggregations, advantage
normalisations, truncation policies), with one decorator and one error for an unknown name.

The config accepts whatever is registered (trainer/config.py checks a name against the registry,
never against a closed list), so registering a new loss is enough to use it. No values here.
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

    def add(self, name: str, value: T) -> T:
        self._items[name] = value
        return value

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under `name`."""
        return lambda value: self.add(name, value)

    def __getitem__(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(self.unknown(name))
        return self._items[name]

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
