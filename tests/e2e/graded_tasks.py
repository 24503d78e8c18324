"""`graded_code`: synth_code graded by the fraction of its tests passed (partial credit).

Loaded by the e2e tests through SCALERL_TASKS. Same prompts, tests and judge as `synth_code`
(the tiny model was warm-started on them); only the code verifier's `partial_credit` option is
on, so each verdict carries its credit (envs/code/verifier.py) and the trainer maps it between
the wrong and correct rewards.
"""

from scalerl.envs import register_task
from scalerl.envs.code.tasks import SynthCodeTask


@register_task("graded_code")
class GradedCode(SynthCodeTask):
    def __init__(self):
        super().__init__("graded_code")
        self.options = {**self.options, "partial_credit": True}
