"""The training console's lines: at most 80 columns per step, held-out figures and error shares."""

from scalerl.trainer.console import bar_figures, heldout, si, step_line, validation_line

STEP = {"reward/mean": -0.3515625, "loss/value": -0.07532, "policy/entropy": 0.1342,
        "rollout/truncated_frac": 0.0, "batch/error_excluded_frac": 0.25,
        "rollout/tokens_per_s": 10593.2, "trainer/tokens_per_s": 1059.0}
VAL = {"val/arith/pass@1": 0.281, "val/arith/mean@4": 0.281, "val/synth_code/pass@1": 0.0,
       "val/synth_code/error_frac": 0.995, "val/pass@1": 0.2, "val/seconds": 12.4}


def test_si_suffixes():
    assert (si(1059), si(10593.2), si(2.5e6), si(0.25)) == ("1.06k", "10.6k", "2.5M", "0.25")


def test_a_step_line_holds_its_figures_in_80_columns():
    line = step_line(12, 120, STEP)
    assert line == ("step 12/120 reward -0.352 loss -0.0753 ent 0.134 trunc 0.00 err 0.25 "
                    "10.6k tok/s")
    assert len(line) <= 80
    long = step_line(100, 120, STEP | {"loss/value": -0.000123456})
    assert long == "step 100/120 reward -0.352 loss -0.000123 ent 0.134 trunc 0.00 err 0.25"
    huge = step_line(123456, 999999, {k: -123456.789 for k in STEP})
    assert len(huge) <= 80 and huge.split() == ["step", "123456/999999", "reward", "-123456.789",
                                                "loss", "-1.23e+05", "ent", "-1.23e+05",
                                                "-123k", "tok/s"]  # trunc, err did not fit


def test_held_out_figures_are_per_task_pass_at_1():
    assert heldout(VAL) == {"arith": 0.281, "synth_code": 0.0}  # not the overall val/pass@1
    figures = bar_figures(STEP, heldout(VAL))
    assert figures == "reward -0.35 · arith .28 synth_code .00 · 10.6k tok/s"


def test_a_validation_line_names_tasks_whose_verifier_failed():
    assert validation_line(20, VAL) == ("held-out step 20 (12 s): arith 0.281  synth_code 0.000 "
                                        "(100% verifier errors)")
