"""Config: recipes load, overrides coerce, bad values and unknown keys fail with one clear line."""

import dataclasses

import pytest

from scalerl.config import (
    ConfigError,
    RunConfig,
    TaskMix,
    build,
    load_config,
    recipe_names,
    to_dict,
    validate,
)


def test_all_recipes_exist_and_build():
    assert {"scalerl", "grpo-deepseek", "dapo-qwen", "magistral", "minimax",
            "tiny-cpu"} <= set(recipe_names())
    for name in recipe_names():
        cfg = load_config(name)
        assert isinstance(cfg, RunConfig)


def test_paper_defaults_in_the_scalerl_recipe():
    cfg = load_config("scalerl")
    assert (cfg.loss.name, cfg.loss.aggregation, cfg.loss.eps_max) == ("cispo", "prompt", 4.0)
    assert cfg.advantages.normalise == "batch" and cfg.policy.fp32_head
    assert (cfg.optim.lr, cfg.optim.eps, cfg.optim.weight_decay, cfg.optim.warmup_steps) == (
        5e-7, 1e-15, 0.01, 100)
    assert (cfg.offpolicy.prompts_per_step, cfg.offpolicy.rollouts_per_prompt) == (48, 16)
    assert (cfg.offpolicy.mode, cfg.offpolicy.max_lag) == ("pipelinerl", 8)
    assert cfg.filters.zero_variance and cfg.filters.retire
    assert cfg.tasks[0].budget.thinking == (10240, 12288) and cfg.tasks[0].budget.answer == 2048


def test_baselines_differ_where_the_paper_says():
    grpo, dapo, minimax = (load_config(n) for n in ("grpo-deepseek", "dapo-qwen", "minimax"))
    assert (grpo.loss.name, grpo.loss.aggregation, grpo.loss.clip_high) == ("grpo", "sample", 0.2)
    assert (dapo.loss.clip_low, dapo.loss.clip_high, dapo.offpolicy.prompts_per_step) == (
        0.2, 0.26, 80)
    assert minimax.loss.name == "cispo" and minimax.policy.fp32_head


def test_overrides_coerce_types():
    cfg = load_config("tiny-cpu", ["loss.name=grpo", "optim.lr=3e-4", "steps=5",
                                   "filters.retire=false", "val.ks=[1,2]", "val.limit=null",
                                   "tasks.0.budget.thinking=[8,12]", "loss.eps_max=5"])
    assert cfg.loss.name == "grpo" and cfg.optim.lr == 3e-4 and cfg.steps == 5
    assert cfg.filters.retire is False and cfg.val.ks == (1, 2) and cfg.val.limit is None
    assert cfg.tasks[0].budget.thinking == (8, 12) and cfg.loss.eps_max == 5.0


def test_unknown_key_names_the_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'loss.nme'; valid keys: name, aggregation"):
        load_config("tiny-cpu", ["loss.nme=grpo"])


def test_a_name_outside_its_registry_names_what_is_registered():
    with pytest.raises(ConfigError, match=r"^loss.aggregation = 'seq': allowed: prompt, sample, "
                                          r"token \(the registered aggregation names\)$"):
        load_config("tiny-cpu", ["loss.aggregation=seq"])


def test_a_registered_loss_is_usable_without_touching_the_config(monkeypatch):
    from scalerl.trainer import losses

    with pytest.raises(ConfigError, match="^loss.name = 'my_loss': allowed: cispo, dapo, grpo, "
                                          "gspo "):
        load_config("tiny-cpu", ["loss.name=my_loss"])
    monkeypatch.setattr(losses.LOSSES, "_items", dict(losses.LOSSES._items))  # this test only
    losses.register_loss("my_loss", clip_low=0.1, clip_high=0.1)(losses.LOSSES["grpo"].fn)
    assert load_config("tiny-cpu", ["loss.name=my_loss"]).loss.name == "my_loss"


def test_bad_type_is_one_line():
    with pytest.raises(ConfigError, match=r"^steps = 'many': expected int$"):
        load_config("tiny-cpu", ["steps=many"])


def test_every_bad_value_is_one_line_across_sections():
    with pytest.raises(ConfigError) as info:
        load_config("tiny-cpu", ["optim.lr=-1", "offpolicy.rollouts_per_prompt=1",
                                 "offpolicy.mode=pipelinerl", "offpolicy.k=2"])
    lines = str(info.value).splitlines()
    assert lines == [
        "optim.lr = -1.0: must be > 0",
        "offpolicy.k = 2: must be 1 with mode pipelinerl (its staleness knob is "
        "offpolicy.max_lag)",
        "offpolicy.rollouts_per_prompt = 1: must be >= 2 (a group)",
    ]


@pytest.mark.parametrize(("section", "cls", "kwargs"), [
    ("optim", "OptimConfig", {"lr": -1.0}),
    ("policy", "PolicyConfig", {"cpu_threads": 0}),
    ("offpolicy", "OffPolicyConfig", {"micro_batch_size": 0}),
    ("advantages", "AdvantageConfig", {"correct_reward": -1.0}),
    ("filters", "FilterConfig", {"truncation": "mask"}),
    ("val", "ValConfig", {"limit": 0}),
])
def test_a_section_built_directly_raises_the_run_config_s_error(section, cls, kwargs):
    import scalerl.trainer.config as tc

    with pytest.raises(ValueError) as direct:
        getattr(tc, cls)(**kwargs)
    key, value = next(iter(kwargs.items()))
    value = list(value) if isinstance(value, tuple) else value
    with pytest.raises(ConfigError) as loaded:
        load_config("tiny-cpu", [f"{section}.{key}={value}"])
    assert str(direct.value) == str(loaded.value)
    assert str(direct.value).startswith(f"{section}.{key} = ") and "\n" not in str(direct.value)
    with pytest.raises(ValueError, match="^steps = 0: must be > 0$"):
        tc.TrainerConfig(steps=0)


def test_fp32_head_is_one_setting_the_engine_follows():
    with pytest.raises(ConfigError, match=r"unknown key 'engine.fp32_head'; valid keys: dtype"):
        load_config("tiny-cpu", ["engine.fp32_head=false"])
    assert load_config("tiny-cpu", ["policy.fp32_head=false"]).policy.fp32_head is False


def test_a_bad_budget_is_one_line_naming_the_task():
    with pytest.raises(ConfigError, match=r"^tasks\[0\].budget: Budget.answer must be > 0, got 0$"):
        load_config("tiny-cpu", ["tasks.0.budget.answer=0"])


def test_the_sandbox_section_is_settable_and_checked():
    cfg = load_config("tiny-cpu", ["sandbox.backend=process", "sandbox.workers=3"])
    assert (cfg.sandbox.backend, cfg.sandbox.workers) == ("process", 3)
    with pytest.raises(ConfigError, match=r"^sandbox"):
        load_config("tiny-cpu", ["sandbox.workers=0"])


def test_unknown_offpolicy_mode_is_refused_naming_the_sources():
    with pytest.raises(ConfigError, match="allowed: ppo, pipelinerl"):
        load_config("tiny-cpu", ["offpolicy.mode=async"])


def test_pipelinerl_needs_k_1():
    with pytest.raises(ConfigError, match="offpolicy.k = 8: must be 1 with mode pipelinerl"):
        load_config("magistral", ["offpolicy.k=8"])


def test_unknown_task_is_reported_with_known_names():
    cfg = dataclasses.replace(load_config("tiny-cpu"), tasks=(TaskMix("nope"),))
    with pytest.raises(ConfigError, match=r"tasks\[0\].name: unknown task 'nope'; known tasks"):
        validate(cfg)


def test_round_trip_through_plain_data():
    cfg = load_config("scalerl")
    assert build(RunConfig, to_dict(cfg)) == cfg


def test_every_config_field_has_a_docstring():
    import ast
    import inspect

    import scalerl.config as glue
    import scalerl.trainer.config as trainer_config

    for module in (glue, trainer_config):
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef) or not node.name.endswith(("Config", "Mix")):
                continue
            body = node.body
            for i, item in enumerate(body):
                if isinstance(item, ast.AnnAssign):
                    nxt = body[i + 1] if i + 1 < len(body) else None
                    documented = (isinstance(nxt, ast.Expr)
                                  and isinstance(getattr(nxt, "value", None), ast.Constant))
                    assert documented, f"{node.name}.{item.target.id} has no docstring"


def test_cpu_threads_must_be_positive_or_null():
    with pytest.raises(ConfigError, match=r"^policy.cpu_threads = 0: must be >= 1 or null"):
        load_config("tiny-cpu", ["policy.cpu_threads=0"])
    assert validate(load_config("tiny-cpu", ["policy.cpu_threads=null"])
                    ).policy.cpu_threads is None


@pytest.mark.parametrize(("override", "message"), [
    ("policy.logit_chunk_tokens=0", "policy.logit_chunk_tokens = 0: must be >= 1"),
    ("policy.collective_timeout_s=0", "policy.collective_timeout_s = 0.0: must be > 0"),
])
def test_trainer_scale_settings_are_checked(override, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        load_config("tiny-cpu", [override])


def test_sharding_and_engine_devices_are_settable():
    with pytest.raises(ConfigError, match="policy.sharding = 'zero3': allowed: none, fsdp2"):
        load_config("tiny-cpu", ["policy.sharding=zero3"])
    cfg = load_config("tiny-cpu", ["policy.sharding=fsdp2", "engine.devices=[6, 7]",
                                   "policy.gradient_checkpointing=true"])
    assert cfg.policy.sharding == "fsdp2" and cfg.engine.devices == (6, 7)
    assert cfg.policy.gradient_checkpointing is True
    gpu = [load_config(name) for name in recipe_names() if not name.startswith("tiny-cpu")]
    assert gpu and all(c.policy.sharding == "fsdp2" and c.policy.gradient_checkpointing
                       for c in gpu)


def test_the_tool_format_is_an_engine_setting_checked_at_start_up():
    assert load_config("tiny-cpu").engine.tool_format == "auto"
    assert load_config("tiny-cpu", ["engine.tool_format=plain"]).engine.tool_format == "plain"
    with pytest.raises(ConfigError) as info:
        load_config("tiny-cpu", ["engine.tool_format=xml"])
    assert "tool_format" in str(info.value) and "auto, chat, plain" in str(info.value)
    assert "\n" not in str(info.value)
