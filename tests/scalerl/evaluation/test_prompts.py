"""Prompt styles through `scalerl eval`: what the generator is handed under each protocol.

The messages are taken as the generator takes them (the plan's tasks in a Scorer, the sample's
`messages` with the task's system prompt), from real-schema fixture rows; the expected texts are
written out by hand: DeepSeek-R1's usage (no system message, its instruction in the user turn)
and LiveCodeBench's template, read from lcb_runner/prompts/code_generation.py (its generic chat
style: system message, `### Question:`, `### Format:` with or without starter code, `### Answer:`).
"""

from __future__ import annotations

import json

import bench_fixtures as bf
import pytest

from scalerl.cli import build_parser
from scalerl.commands.eval import prepare
from scalerl.envs.math.verifier import MATH_SYSTEM_PROMPT
from scalerl.evaluation.prompts import PROMPT_STYLES, PromptStyle, prompted_tasks
from scalerl.evaluation.protocols import PROTOCOLS, Protocol
from scalerl.evaluation.render import settings_lines
from scalerl.rollout.scorer import Scorer

LCB_SYSTEM = ("You are an expert Python programmer. You will be given a question (problem "
              "specification) and will generate a correct Python program that matches the "
              "specification and passes all tests.")


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return bf.write_all(tmp_path_factory.mktemp("bench"))


@pytest.fixture
def model(tmp_path) -> str:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    return str(path)


def plan_of(copies, model, tmp_path, tasks, *flags):
    data = [f for n in {t.split(":")[0] for t in tasks.split(",")}
            for f in ("--data", f"{n}={copies[n]}")]
    argv = ["eval", "--model", model, "--tasks", tasks, "--out", str(tmp_path / "o"), *data,
            *flags]
    return prepare(build_parser("eval").parse_args(argv))


def rendered(plan, task: str) -> dict[str, list]:
    """Each sample's messages, by id, as the generator renders them."""
    scorer = Scorer(plan.tasks)
    try:
        return {s.id: s.messages(scorer.system_prompt(task))
                for s in plan.tasks[task].samples("test")}
    finally:
        scorer.close()


def test_r1_renders_the_r1_user_turn_and_no_system_message(copies, model, tmp_path):
    plan = plan_of(copies, model, tmp_path, "math500", "--protocol", "r1")
    row = bf.MATH500[1]
    messages = rendered(plan, "math500")[row["unique_id"]]
    assert messages == [{"role": "user", "content": row["problem"] + "\nPlease reason step by "
                         "step, and put your final answer within \\boxed{}."}]
    assert plan.settings.prompt == "r1" and plan.settings.summary()["prompt"] == "r1"


def test_r1_folds_a_code_tasks_instruction_into_the_user_turn(copies, model, tmp_path):
    plan = plan_of(copies, model, tmp_path, "mbpp", "--protocol", "r1")
    own = plan_of(copies, model, tmp_path, "mbpp", "--protocol", "greedy")
    for sid, messages in rendered(plan, "mbpp").items():
        system, user = rendered(own, "mbpp")[sid]
        assert system["role"] == "system"
        assert messages == [{"role": "user",
                             "content": f"{user['content']}\n\n{system['content']}"}]


def test_the_other_protocols_keep_the_tasks_own_prompt(copies, model, tmp_path):
    for protocol in ("greedy", "default"):
        plan = plan_of(copies, model, tmp_path, "math500", "--protocol", protocol)
        row = bf.MATH500[0]
        assert rendered(plan, "math500")[row["unique_id"]] == [
            {"role": "system", "content": MATH_SYSTEM_PROMPT},
            {"role": "user", "content": row["problem"]}]
        assert plan.settings.prompt == "task"


def test_lcb_renders_livecodebenchs_template_with_and_without_starter_code(copies, model,
                                                                           tmp_path):
    plan = plan_of(copies, model, tmp_path, "livecodebench", "--protocol", "lcb")
    s = plan.settings
    assert (s.temperature, s.top_p, s.n_for("livecodebench"), s.ks) == (0.2, 0.95, 10, (1, 5))
    assert s.budget_for("livecodebench").answer == 2000 and s.prompt == "lcb"
    by_id = {r["question_id"]: r for r in bf.LIVECODEBENCH}
    got = rendered(plan, "livecodebench")
    stdin = by_id["abc001_a"]
    assert stdin["starter_code"] == ""
    assert got["abc001_a"] == [
        {"role": "system", "content": LCB_SYSTEM},
        {"role": "user", "content": f"### Question:\n{stdin['question_content']}\n\n"
         "### Format: Read the inputs from stdin solve the problem and write the answer to stdout "
         "(do not directly test on the sample inputs). Enclose your code within delimiters as "
         "follows. Ensure that when the python program runs, it reads the inputs, runs the "
         "algorithm and writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n"
         "### Answer: (use the provided format with backticks)\n\n"}]
    func = by_id["3001"]
    assert func["starter_code"]
    assert got["3001"] == [
        {"role": "system", "content": LCB_SYSTEM},
        {"role": "user", "content": f"### Question:\n{func['question_content']}\n\n"
         "### Format: You will use the following starter code to write the solution to the "
         f"problem and enclose your code within delimiters.\n```python\n{func['starter_code']}"
         "\n```\n\n### Answer: (use the provided format with backticks)\n\n"}]


def test_lcb_serves_a_livecodebench_window_and_refuses_other_tasks(copies, model, tmp_path):
    plan = plan_of(copies, model, tmp_path, "livecodebench:2024-08..2025-02", "--protocol", "lcb")
    assert all(m[0]["content"] == LCB_SYSTEM
               for m in rendered(plan, "livecodebench:2024-08..2025-02").values())
    with pytest.raises(ValueError, match="task 'math500' is not LiveCodeBench"):
        plan_of(copies, model, tmp_path, "math500", "--protocol", "lcb")


def test_a_styled_task_grades_as_the_task_does(copies, model, tmp_path):
    plan = plan_of(copies, model, tmp_path, "math500", "--protocol", "r1")
    task = plan.tasks["math500"]
    sample = task.samples("test")[1]
    assert task.score(sample, "so \\boxed{\\frac{3}{4}}").status == "correct"
    assert task.score(sample, "so \\boxed{\\frac{4}{3}}").status == "wrong"
    assert sample.answer == "\\frac{3}{4}" and task.system_prompt is None


def test_the_prompt_style_is_in_the_cache_key_and_the_report(copies, model, tmp_path):
    r1 = plan_of(copies, model, tmp_path, "math500", "--protocol", "r1", "--n", "4").settings
    import dataclasses

    same_but_own_prompt = dataclasses.replace(r1, prompt="task")
    assert r1.key("math500") != same_but_own_prompt.key("math500")
    assert "prompt" not in same_but_own_prompt.sampling("math500")  # old keys stay valid
    assert "prompt style `r1`" in settings_lines(r1.summary())[0]


def test_every_protocol_names_a_known_style_and_unknown_ones_are_refused():
    assert {p.prompt for p in PROTOCOLS.values()} <= set(PROMPT_STYLES)
    with pytest.raises(ValueError, match="unknown prompt style 'chatml'; styles: task, r1, lcb"):
        Protocol(name="x", description="x", temperature=0.0, prompt="chatml")
    with pytest.raises(ValueError, match="unknown prompt style"):
        prompted_tasks({}, "chatml")
    with pytest.raises(ValueError):
        PromptStyle("", "", None)
