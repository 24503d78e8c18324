"""A tiny OpenEnv environment served by openenv-core's own server, for the adapter's tests.

Guess the number: `reset(answer=...)` (the sample's answer; else 5) sets the secret; each step's
guess is answered `higher`, `lower` or `correct` (reward 1.0, done); a wrong guess has reward 0.0
and the third wrong one ends the episode (done, reward 0.0). The guess `sleep` sleeps 3 s (for
time limits). `--action text` takes `{"guess": str}`, `--action int` takes `{"guess": int,
"note": str}` (not a text action). `GET /test/live` counts the environment instances alive
(sessions the server has not closed). Run: `python openenv_game.py --action text --port-file F
[--max-sessions N]`: it binds a free loopback port, writes it to F, and serves until killed.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from pathlib import Path

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field

MAX_WRONG = 3
LIVE = [0]
_LOCK = threading.Lock()


class TextGuess(Action):
    """Guess the secret number (write just the number)."""

    guess: str = Field(..., description="your guess")


class IntGuess(Action):
    """Guess the secret number."""

    guess: int = Field(..., description="your guess, an integer from 1 to 10")
    note: str = Field("", description="a note to yourself")


class GuessObservation(Observation):
    message: str = Field("", description="what the game says")
    tries: int = Field(0, description="wrong guesses so far")


class GuessGame(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.secret, self.wrong, self._state = 5, 0, State()
        with _LOCK:
            LIVE[0] += 1

    def reset(self, seed=None, episode_id=None, answer=None, **kwargs) -> GuessObservation:
        self.secret, self.wrong = int(answer) if answer is not None else 5, 0
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(message="Guess a number from 1 to 10.")

    def step(self, action, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        text = str(action.guess).strip()
        if text == "sleep":
            time.sleep(3)
        if text == str(self.secret):
            return GuessObservation(message="correct", tries=self.wrong, reward=1.0, done=True)
        self.wrong += 1
        hint = (f"not a number: {text}" if not text.lstrip("-").isdigit()
                else "higher" if int(text) < self.secret else "lower")
        return GuessObservation(message=hint, tries=self.wrong, reward=0.0,
                                done=self.wrong >= MAX_WRONG)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        with _LOCK:
            LIVE[0] -= 1


def app(action: str, max_sessions: int):
    action_cls = TextGuess if action == "text" else IntGuess
    served = create_fastapi_app(GuessGame, action_cls, GuessObservation,
                                max_concurrent_envs=max_sessions)

    @served.get("/test/live")
    def live() -> dict:
        # the HTTP handlers make and close an instance per request; /ws sessions stay alive
        return {"live": LIVE[0]}

    return served


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--action", choices=["text", "int"], default="text")
    parser.add_argument("--max-sessions", type=int, default=16)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app(args.action, args.max_sessions), log_level="warning")
    server = uvicorn.Server(config)
    Path(args.port_file).write_text(str(sock.getsockname()[1]))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
