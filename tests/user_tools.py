"""A user's tools and environments, as a user would write them (imported by path in specs:
`user_tools:lookup`, `user_tools:Game`): typed, documented functions, a stateful tool class and a
TRL-style environment class. Used by tests/envs/test_tools.py and the CLI score tests."""

from __future__ import annotations

import time

from scalerl.envs.tool_env import ToolEnvironment

CAPITALS = {"france": "Paris", "italy": "Rome", "japan": "Tokyo"}


def lookup(country: str, upper: bool = False) -> str:
    """Look up a country's capital.

    Args:
        country: the country's name, in English
        upper: write the answer in capitals
    """
    name = CAPITALS[country.lower()]
    return name.upper() if upper else name


def add(a: int, b: int) -> dict:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return {"sum": a + b}


def nap(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "awake"


def shout(text: str) -> str:
    """Repeat a text many times.

    Args:
        text: what to repeat
    """
    return text * 1000


class Counter(ToolEnvironment):
    """A stateful tool class: each rollout gets its own counter."""

    max_turns = 5
    closed: list[int] = []

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def bump(self, by: int) -> int:
        """Add to the counter and return it.

        Args:
            by: how much to add
        """
        self.count += by
        return self.count

    def get_reward(self) -> float:
        return min(self.count, 10) / 10

    def cleanup(self) -> None:
        Counter.closed.append(self.count)


class Game:
    """A TRL-style environment class (trl's environment_factory contract): guess the number."""

    def reset(self, **row) -> str:
        self.target = int(str(row["answer"]))
        self.guesses = 0
        self.won = False
        return f" Guess a number; the secret is {self.target % 10} mod 10."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: your guess
        """
        self.guesses += 1
        if number == self.target:
            self.won = True
            return "right"
        return "higher" if number < self.target else "lower"

    @property
    def done(self) -> bool:
        return self.won

    def get_reward(self) -> float:
        return 1.0 if self.won else 0.0


class Scored:
    """A TRL-style class whose reward is on another scale (set reward_range)."""

    def reset(self, **row) -> None:
        self.points = 0

    def score_points(self, n: int) -> str:
        """Score points.

        Args:
            n: how many
        """
        self.points += n
        return str(self.points)

    @property
    def reward(self) -> float:
        return float(self.points)
