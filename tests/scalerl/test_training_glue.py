"""The training glue's launch rules and start-up facts: Accelerate's own sharding is refused, the
shipped launch configs are plain multi-GPU ones, the trainer state's bytes per parameter, and
placement counts the GPUs without starting CUDA."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from accelerate.utils import DistributedType

from scalerl.coerce import ConfigError
from scalerl.trainer.policy import PolicyModule
from scalerl.trainer.sharding import memory_line, state_bytes_per_param, unique_params
from scalerl.training import check_head_dtype, check_launch

LAUNCH = Path(__file__).resolve().parents[2] / "scalerl" / "recipes" / "accelerate"


@pytest.mark.parametrize("kind", [DistributedType.FSDP, DistributedType.DEEPSPEED])
def test_accelerate_fsdp_or_deepspeed_launches_are_refused_in_one_line(kind):
    # Accelerate enables these plugins only on GPUs, so the launch is stood in for here.
    with pytest.raises(ConfigError) as err:
        check_launch(SimpleNamespace(distributed_type=kind))
    text = str(err.value)
    assert "\n" not in text and "policy.sharding=fsdp2" in text and kind.value in text
    check_launch(SimpleNamespace(distributed_type=DistributedType.MULTI_GPU))


def test_shipped_launch_configs_are_plain_multi_gpu_launches():
    configs = {p.name: yaml.safe_load(p.read_text()) for p in LAUNCH.glob("*.yaml")}
    assert sorted(configs) == ["ddp.yaml", "fsdp.yaml"]
    for cfg in configs.values():
        assert cfg["distributed_type"] == "MULTI_GPU" and "fsdp_config" not in cfg


def test_bytes_per_parameter_by_hand():
    assert state_bytes_per_param(torch.float32) == 16  # weight 4 + grad 4 + two moments 8
    assert state_bytes_per_param(torch.bfloat16) == 8
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1000))  # 1,001,000 parameters
    line = memory_line(PolicyModule(model), world=4, sharded=True)
    assert "float32 weights, gradients and AdamW moments = 16 B/param x 0.001B params" in line
    assert "= 0.01 GiB" in line and "sharded over 4" in line
    tied = torch.nn.Embedding(10, 4)
    model = torch.nn.ModuleDict({"embed": tied, "head": torch.nn.Linear(4, 10, bias=False)})
    model["head"].weight = tied.weight  # a tied head is counted once: 40 parameters
    assert unique_params(model) == 40
    assert "bfloat16 weights, gradients and AdamW moments = 8 B/param" in memory_line(
        PolicyModule(model.to(torch.bfloat16)), 1, False)


def test_a_bf16_trainer_head_beside_an_fp32_engine_is_refused_in_one_line():
    from scalerl.trainer.config import PolicyConfig

    bf16_head = PolicyConfig(dtype="auto", fp32_head=False)
    with pytest.raises(ConfigError, match="in bfloat16 but engine.dtype = float32") as err:
        check_head_dtype(bf16_head, "float32", on_gpu=True)
    assert "\n" not in str(err.value)
    check_head_dtype(bf16_head, "bfloat16", on_gpu=True)
    check_head_dtype(bf16_head, "float32", on_gpu=False)  # CPU: fp32 body, fp32 engine
    check_head_dtype(PolicyConfig(fp32_head=True), "bfloat16", on_gpu=True)


def test_placement_never_starts_cuda_before_the_trainers_view_is_narrowed(monkeypatch):
    # A CUDA build on a node without NVML: torch's own device_count would ask CUDA
    # (cudaGetDeviceCount), which fixes this process's view of the GPUs before
    # CUDA_VISIBLE_DEVICES is narrowed to the trainer's. No GPU here: the build and NVML are
    # stood in for, and any call into CUDA fails the test.
    from scalerl.config import load_config
    from scalerl.planning import placement
    from scalerl.training import LAUNCH_GPUS, place_gpus

    def cuda(*_):
        raise AssertionError("placement asked CUDA")

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", cuda)
    monkeypatch.setattr(torch.cuda, "init", cuda)
    monkeypatch.setattr(placement, "_nvml_count", lambda: -1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv(LAUNCH_GPUS, raising=False)
    placed = place_gpus(load_config("scalerl"))
    assert placed.train == ("0", "1") and placed.engine_gpus() == [("2",), ("3",)]
    assert placed.engines == 2  # engine.data_parallel_size null: every GPU the ranks leave
    assert torch.cuda.is_initialized() is False
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and os.environ[LAUNCH_GPUS] == "0,1,2,3"
