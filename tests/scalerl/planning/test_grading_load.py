"""The dry run's grading estimate (scalerl/planning/grading_load.py): a step's verdicts in CPU
seconds against the node's spare cores over the engines' generate time, worked by hand; and the
line the ScaleRL recipe's dry run prints on 8 x H100."""

from __future__ import annotations

import pytest
from published_configs import QWEN3_8B, write_config

from scalerl.config import load_config
from scalerl.planning.dry_run import describe, plan_run
from scalerl.planning.grading_load import grading_line, grading_load, verdict_core_s
from scalerl.planning.sizing import GIB

RECIPE_CODE_S = 4.159
"""One code verdict by hand: 0.043 (run) + 10 tests x 0.0116 + 0.1 spinning x 10 tests x 4 s
= 0.043 + 0.116 + 4.0."""


def test_a_code_and_a_math_verdict_by_hand():
    assert verdict_core_s("code") == pytest.approx(RECIPE_CODE_S)
    assert verdict_core_s("code", tests=5, spin_share=0.0) == pytest.approx(0.043 + 0.058)
    assert verdict_core_s("math") == pytest.approx(0.00351)
    with pytest.raises(ValueError, match="'text': expected code or math"):
        verdict_core_s("text")


def test_the_recipe_step_is_graded_locally_by_hand():
    # 768 rollouts, half code: 384 x 4.159 + 384 x 0.00351 = 1,597.056 + 1.348 = 1,598.404
    # core-s over 676 s of generation = 2.365 cores; spare: 112 - 4 ranks x 2 - 4 engines x
    # (2 + 1 GPU) - 4 = 88
    load = grading_load(rollouts_per_step=768, code_share=0.5, generate_s=676.0,
                        node_cores=112, ranks=4, engines=4, tp=1)
    assert (load.code_verdicts, load.math_verdicts) == (384, 384)
    assert load.core_s == pytest.approx(1598.404, abs=1e-3)
    assert load.cores == pytest.approx(2.3645, abs=1e-4)
    assert load.spare_cores == 88 and not load.ray and load.nodes == 0
    line, = grading_line(load)
    assert line.endswith("2.4 cores of the 88 spare of 112: local grading keeps up "
                         "(verifiers.cluster: ray not needed)")


def test_past_the_spare_cores_it_names_ray_and_the_nodes():
    # 1,000 code verdicts of 10 core-s in 100 s: 100 cores; spare 64 - 8 x 2 - 4 = 44;
    # ceil((100 - 44) / 64) = 1 more node
    load = grading_load(rollouts_per_step=1000, code_share=1.0, generate_s=100.0,
                        node_cores=64, ranks=8, engines=0, code_core_s=10.0)
    assert load.cores == pytest.approx(100.0) and load.spare_cores == 44
    assert load.ray and load.nodes == 1
    assert grading_line(load)[0].endswith("needs verifiers.cluster: ray, 100 grading cores "
                                          "(1 more node(s) of 64 cores)")
    with pytest.raises(ValueError, match="code_share must be in"):
        grading_load(rollouts_per_step=1, code_share=1.5, generate_s=1.0, node_cores=1,
                     ranks=0, engines=0)


def test_the_recipe_dry_run_prints_its_grading_line(tmp_path):
    cfg = load_config("scalerl", [f"policy.model={write_config(tmp_path, QWEN3_8B)}"])
    run = plan_run(cfg, str(tmp_path), gpus=8, gpu_bytes=int(81559 / 1024 * GIB),
                   gpu_name="H100-SXM")
    g = run.grading
    assert (g.code_verdicts, g.math_verdicts, g.spare_cores) == (384, 384, 88)
    assert g.generate_s == pytest.approx(run.speed.plan.generate_s)
    assert g.core_s == pytest.approx(384 * RECIPE_CODE_S + 384 * 0.00351)
    assert any(line.startswith("grading: 384 code + 384 math verdicts per step")
               for line in describe(run))
