"""The OpenEnv adapter against real OpenEnv servers (openenv-core's own, on loopback), no mocks.

The game (tests/envs/adapters/openenv_game.py) is served by openenv-core's `create_fastapi_app`
under uvicorn in a subprocess (tests/openenv_servers.py); episodes are played through the turn
rule every loop uses (envs/turns.py `Play`), with the assistant turns written here (no engine).
openenv-core is a dev dependency (`make install`); without it the servers fail loudly.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from openenv_servers import GameServer

from scalerl.envs.adapters import from_spec
from scalerl.envs.adapters.openenv import OpenEnvEnvironment, answer_text
from scalerl.envs.base import Sample
from scalerl.envs.environment import EnvContext
from scalerl.envs.tool_format import tool_format
from scalerl.envs.turns import EnvFailed, Play
from scalerl.rollout.local_servers import free_port

CHAT = EnvContext(tool_format=tool_format("chat"))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The module's servers, started together: two text games, an int game, a one-session one."""
    work = tmp_path_factory.mktemp("openenv")
    started = {"text": GameServer(work), "text2": GameServer(work),
               "int": GameServer(work, action="int"), "one": GameServer(work, max_sessions=1)}
    try:
        yield {k: s.wait_ready() for k, s in started.items()}
    finally:
        for s in started.values():
            s.stop()


def sample(answer: str = "7", sid: str = "s1") -> Sample:
    return Sample(id=sid, task="guess", prompt="Play. ", answer=answer)


def say(play: Play, transcript: list, text: str):
    """One assistant turn: appended, answered, the observation appended."""
    transcript.append({"role": "assistant", "content": text})
    answer = play.answer(transcript, sum(m["role"] == "assistant" for m in transcript) - 1)
    transcript.extend(answer.reply.messages)
    return answer


def started(env, smp=None, context=CHAT) -> tuple[Play, list]:
    play = Play(env, smp or sample(), context)
    opening = play.start()
    return play, [{"role": "user", "content": "Play. "}, *opening]


# --- one episode --------------------------------------------------------------------------------
def test_opening_is_the_first_observation_and_a_correct_guess_is_full_credit(servers):
    env = OpenEnvEnvironment(servers["text"].url, observation_field="message", max_turns=4)
    play, transcript = started(env)
    try:
        assert transcript[1] == {"role": "user", "content": "Guess a number from 1 to 10."}
        first = say(play, transcript, "3")
        assert first.ended is None and first.reply.reward == 0.0
        assert transcript[-1] == {"role": "user", "content": "higher"}
        last = say(play, transcript, "<think>higher than 3... 7?</think> 7 ")
        assert last.ended == "done" and last.reply.done and last.reply.reward == 1.0
        assert last.reply.messages == ()
        verdict = play.verdict("")
        assert (verdict.status, verdict.reward) == ("correct", 1.0)
    finally:
        play.close()


def test_three_wrong_guesses_end_the_episode_with_no_credit(servers):
    env = OpenEnvEnvironment(servers["text"].url, observation_field="message", max_turns=8)
    play, transcript = started(env, sample("2"))
    try:
        hints = [say(play, transcript, g) for g in ("5", "x", "9")]
        assert [h.reply.messages[0]["content"] for h in hints[:2]] == ["lower", "not a number: x"]
        assert [h.ended for h in hints] == [None, None, "done"]
        assert [h.reply.reward for h in hints] == [0.0, 0.0, 0.0]
        verdict = play.verdict("")
        assert (verdict.status, verdict.reward) == ("wrong", 0.0)
    finally:
        play.close()


def test_max_turns_end_the_episode_before_the_server_does(servers):
    env = OpenEnvEnvironment(servers["text"].url, observation_field="message", max_turns=1)
    play, transcript = started(env)
    try:
        assert say(play, transcript, "1").ended == "max_turns"
        assert play.verdict("").status == "wrong"
    finally:
        play.close()


def test_reward_sum_is_mapped_through_reward_range(servers):
    env = OpenEnvEnvironment(servers["text"].url, observation_field="message", reward="sum",
                             reward_range=[0, 2])
    play, transcript = started(env)
    try:
        say(play, transcript, "1")
        say(play, transcript, "7")
        verdict = play.verdict("")
        assert (verdict.status, verdict.reward) == ("wrong", 0.5)
    finally:
        play.close()


def test_without_observation_field_a_many_field_observation_is_shown_as_json(servers):
    env = OpenEnvEnvironment(servers["text"].url)
    play, transcript = started(env)
    try:
        assert json.loads(transcript[1]["content"]) == {
            "message": "Guess a number from 1 to 10.", "tries": 0}
    finally:
        play.close()


def test_observations_are_cut_to_max_observation_chars(servers):
    env = OpenEnvEnvironment(servers["text"].url, observation_field="message",
                             max_observation_chars=100)
    play, transcript = started(env)
    try:
        say(play, transcript, "y" * 500)
        shown = transcript[-1]["content"]
        assert len(shown) <= 100 and shown.startswith("not a number: yyy") and "cut" in shown
    finally:
        play.close()


@pytest.mark.parametrize(("turn", "sent"), [
    ("7", "7"), (" <think>5?</think> 7 ", "7"), ("<think>still think", ""),
    ("<think>a</think> 7 <think>b", ""), ("a</think>b", "b")])
def test_the_answer_after_the_thinking_is_what_the_server_gets(turn, sent):
    assert answer_text(turn) == sent


# --- sessions -----------------------------------------------------------------------------------
def test_concurrent_rollouts_play_separate_episodes(servers):
    server = servers["text"]
    env = OpenEnvEnvironment(server.url, observation_field="message")
    answers = [str(a) for a in range(2, 10)]

    def play_one(answer: str) -> tuple[list, str]:
        play, transcript = started(env, sample(answer, sid=answer))
        try:
            hints = [say(play, transcript, "1").reply.messages[0]["content"]]
            time.sleep(0.2)  # every episode is open at once here
            hints.append(say(play, transcript, answer).ended)
            return hints, play.verdict("").status
        finally:
            play.close()

    with ThreadPoolExecutor(len(answers)) as pool:
        results = list(pool.map(play_one, answers))
    assert results == [(["higher", "done"], "correct")] * len(answers)
    assert server.wait_live(0) == 0


def test_close_releases_the_session(servers):
    server = servers["one"]  # max_concurrent_envs=1
    env = OpenEnvEnvironment(server.url, session_wait_s=0.3)
    first, _ = started(env)
    assert server.wait_live(1) == 1
    with pytest.raises(EnvFailed) as refused:
        started(env, sample(sid="s2"))
    assert refused.value.ended == "env_error"
    assert "max_concurrent_envs" in refused.value.score.detail
    first.close()
    assert server.wait_live(0) == 0
    second, transcript = started(env, sample(sid="s3"))
    try:
        assert "Guess" in transcript[1]["content"]
    finally:
        second.close()
    assert server.wait_live(0) == 0


def test_a_session_freed_while_waiting_is_taken(servers):
    server = servers["one"]
    env = OpenEnvEnvironment(server.url, session_wait_s=20)
    first, _ = started(env)
    threading.Timer(1.0, first.close).start()
    t0 = time.monotonic()
    second, _ = started(env, sample(sid="s2"))
    second.close()
    assert 0.9 < time.monotonic() - t0 < 15


def test_rollouts_spread_over_the_servers_least_loaded(servers):
    a, b = servers["text"], servers["text2"]
    env = from_spec({"openenv": [a.url, b.url], "observation_field": "message"})
    plays = [started(env, sample(sid=str(i)))[0] for i in range(4)]
    try:
        assert sorted(p.state.url for p in plays) == sorted([a.url, a.url, b.url, b.url])
        assert (a.wait_live(2), b.wait_live(2)) == (2, 2)
        plays[0].close()
        fifth = started(env, sample(sid="5"))[0]
        plays.append(fifth)
        assert fifth.state.url == plays[0].state.url  # the freed server is the least loaded
    finally:
        for p in plays:
            p.close()
    assert (a.wait_live(0), b.wait_live(0)) == (0, 0)


# --- tool actions -------------------------------------------------------------------------------
def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def test_an_action_of_several_fields_is_a_tool_whose_arguments_are_its_fields(servers):
    env = OpenEnvEnvironment(servers["int"].url, observation_field="message")
    (schema,) = env.tool_schemas()
    assert schema["function"]["name"] == "act"
    params = schema["function"]["parameters"]
    assert set(params["properties"]) == {"guess", "note"} and params["required"] == ["guess"]
    play, transcript = started(env, sample("4"))
    try:
        bad = say(play, transcript, call("act", guess="four"))
        assert bad.ended is None and bad.reply.outcomes[0].status == "error"
        assert "guess" in bad.reply.outcomes[0].output and bad.reply.reward is None
        other = say(play, transcript, call("guess", guess=4))
        assert "unknown tool 'guess'" in other.reply.outcomes[0].output
        hint = say(play, transcript, call("act", guess=2, note="low?"))
        assert hint.reply.outcomes[0].output == "higher" and hint.reply.reward == 0.0
        assert transcript[-1]["role"] == "tool"
        win = say(play, transcript, call("act", guess=4))
        assert win.ended == "done" and win.reply.reward == 1.0
        assert play.verdict("").status == "correct"
    finally:
        play.close()


def test_a_tool_turn_without_a_call_ends_the_episode_unrewarded(servers):
    env = OpenEnvEnvironment(servers["int"].url)
    play, transcript = started(env)
    try:
        assert say(play, transcript, "I give up").ended == "done"
        assert play.verdict("").status == "no_answer"
    finally:
        play.close()


def test_action_tool_needs_a_format_that_writes_any_tool(servers):
    env = OpenEnvEnvironment(servers["int"].url)
    with pytest.raises(EnvFailed, match="tool_format chat"):
        started(env, context=EnvContext(tool_format=tool_format("plain")))


# --- failures are loud --------------------------------------------------------------------------
def test_a_server_killed_mid_episode_is_an_env_error(tmp_path):
    server = GameServer(tmp_path).wait_ready()
    env = OpenEnvEnvironment(server.url, observation_field="message", timeout_s=10)
    play, transcript = started(env)
    try:
        say(play, transcript, "1")
        server.stop()
        with pytest.raises(EnvFailed) as failed:
            say(play, transcript, "7")
        assert failed.value.ended == "env_error" and failed.value.score.status == "error"
        assert server.url in failed.value.score.detail
    finally:
        play.close()  # the server is gone: closing is quiet
        server.stop()


def test_a_step_past_timeout_s_is_an_env_error(servers):
    env = OpenEnvEnvironment(servers["text"].url, timeout_s=0.5)
    play, transcript = started(env)
    try:
        with pytest.raises(EnvFailed, match=r"no answer to step within 0.5 s \(timeout_s\)"):
            say(play, transcript, "sleep")
    finally:
        play.close()


def test_preflight_is_none_for_a_live_server(servers):
    env = OpenEnvEnvironment([servers["text"].url, servers["text2"].url])
    assert env.preflight() is None


def test_preflight_names_a_dead_server_in_one_line(servers):
    dead = f"http://127.0.0.1:{free_port()}"
    problem = OpenEnvEnvironment([servers["text"].url, dead]).preflight()
    assert problem and "\n" not in problem and dead in problem and "did not answer" in problem


def test_preflight_names_a_server_that_answers_garbage():
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        problem = OpenEnvEnvironment(url).preflight()
        assert problem and "\n" not in problem and url in problem and "not JSON" in problem
    finally:
        httpd.shutdown()


def test_preflight_refuses_options_the_schema_does_not_fit(servers):
    text_on_int = OpenEnvEnvironment(servers["int"].url, action="text").preflight()
    assert "action text needs an Action with one string field" in text_on_int
    no_field = OpenEnvEnvironment(servers["text"].url, observation_field="board").preflight()
    assert "observation_field 'board' is not a field" in no_field and "message" in no_field


def test_a_spec_task_asks_its_server_at_preflight(servers, tmp_path):
    from scalerl.envs.spec import read_spec, task_from_entry

    (tmp_path / "rows.jsonl").write_text('{"prompt": "Play.", "answer": "7"}\n')
    dead = f"http://127.0.0.1:{free_port()}"
    spec = tmp_path / "tasks.yaml"
    live_url = servers["text"].url
    spec.write_text(f"tasks:\n"
                    f"  - {{name: guess_live, kind: math, data: rows.jsonl, max_turns: 3,\n"
                    f"     environment: {{openenv: '{live_url}', reward_range: [0, 1]}}}}\n"
                    f"  - {{name: guess_dead, kind: math, data: rows.jsonl,\n"
                    f"     environment: {{openenv: '{dead}'}}}}\n")
    live, down = (task_from_entry(e) for e in read_spec(spec))
    assert isinstance(live.environment, OpenEnvEnvironment) and live.environment.max_turns == 3
    assert live.preflight() is None
    assert dead in down.preflight()


@pytest.mark.parametrize(("options", "says"), [
    ({"openenv": "localhost:8000"}, "a server is a URL like http://host:8000"),
    ({"openenv": []}, "give a server URL or a list"),
    ({"openenv": "http://x", "action": "json"}, "action must be one of auto, text, tool"),
    ({"openenv": "http://x", "reward": "mean"}, "reward must be one of last, sum"),
    ({"openenv": "http://x", "reward_range": [1, 0]}, "reward_range must be finite with lo < hi"),
    ({"openenv": "http://x", "timeout_s": 0}, "timeout_s must be a number > 0"),
    ({"openenv": "http://x", "session_wait_s": -1}, "session_wait_s must be a number >= 0"),
    ({"openenv": "http://x", "tool_name": "a b"}, "tool_name must be an identifier"),
    ({"openenv": "http://x", "observation_field": 3}, "observation_field must be a field name"),
    ({"openenv": "http://x", "action": "tool", "action_field": "m"}, "action_field is for"),
    ({"openenv": "http://x", "max_turns": 0}, "max_turns must be an integer >= 1"),
    ({"openenv": "http://x", "seed": 1}, "unknown option 'seed'; valid: max_turns"),
])
def test_bad_options_are_one_line_at_construction(options, says):
    with pytest.raises(ValueError, match="openenv|max_turns|reward_range") as err:
        from_spec(options)
    assert says in str(err.value) and "\n" not in str(err.value)
