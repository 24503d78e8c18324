"""A task whose verifier really fails: `filed_arith` reads each gold answer from a file.

Loaded by the e2e tests through SCALERL_TASKS. Its prompts are `arith:add2`'s; its judge reads
`$SCALERL_TEST_ANSWERS/<sample id>.txt` and then judges like arith. A missing file makes the judge
raise FileNotFoundError, which the Task base class turns into an `error` verdict: the verifier
failed, not the model. Nothing here is a stand-in for the verifier or the engine.
"""

import dataclasses
import os
from pathlib import Path

from scalerl.envs import Task, register_task
from scalerl.envs.catalog import get_task


@register_task("filed_arith")
class FiledArith(Task):
    kind = "math"
    source = "arith:add2 prompts; gold answers in $SCALERL_TEST_ANSWERS/<id>.txt"

    def __init__(self):
        base = get_task("arith:add2")
        self.base = base
        self.requires_thinking, self.system_prompt = base.requires_thinking, base.system_prompt

    def build(self, split):
        return [dataclasses.replace(s, task=self.name, answer=None)
                for s in self.base.samples(split)]

    def judge(self, sample, completion, grading):
        gold = (Path(os.environ["SCALERL_TEST_ANSWERS"]) / f"{sample.id}.txt").read_text()
        return super().judge(dataclasses.replace(sample, answer=gold), completion, grading)
