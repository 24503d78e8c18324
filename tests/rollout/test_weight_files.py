"""New weights as safetensors shards: exact round trip, the engine's dtype, bounded shards that
never split a decoder layer, an atomic directory, and no host copy of a tensor already in place."""

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from scalerl.rollout.weight_files import host_tensor, layer_key, write_weights


def model_like(layers: int = 4, width: int = 128) -> list[tuple[str, torch.Tensor]]:
    torch.manual_seed(0)
    named = [("model.embed_tokens.weight", torch.randn(64, width))]
    for i in range(layers):
        p = f"model.layers.{i}."
        named += [(p + "self_attn.q_proj.weight", torch.randn(width, width)),
                  (p + "self_attn.k_proj.weight", torch.randn(width, width)),
                  (p + "mlp.up_proj.weight", torch.randn(2 * width, width)),
                  (p + "input_layernorm.weight", torch.ones(width))]
    return named + [("model.norm.weight", torch.ones(width)), ("lm_head.weight",
                                                                torch.randn(64, width))]


def read_dir(path) -> dict[str, dict[str, torch.Tensor]]:
    return {f.name: load_file(str(f)) for f in sorted(path.glob("*.safetensors"))}


@pytest.mark.parametrize("dtype, torch_dtype", [("float32", torch.float32),
                                                ("bfloat16", torch.bfloat16)])
def test_every_tensor_comes_back_exactly_in_the_engine_dtype(tmp_path, dtype, torch_dtype):
    named = model_like()
    written = write_weights(iter(named), tmp_path / "w", dtype=dtype, chunk_mb=1)
    got = {k: v for shard in read_dir(tmp_path / "w").values() for k, v in shard.items()}
    assert set(got) == {n for n, _ in named} and written.tensors == len(named)
    for name, t in named:
        assert got[name].dtype == torch_dtype
        assert torch.equal(got[name], t.to(torch_dtype)), name


def test_shards_are_bounded_and_never_split_a_layer(tmp_path):
    named = model_like(layers=6)  # each layer: (128*128*2 + 256*128 + 128) * 4 B = 256.5 KiB
    written = write_weights(named, tmp_path / "w", dtype="float32", chunk_mb=1)
    shards = read_dir(tmp_path / "w")
    assert written.shards == len(shards) > 1
    for tensors in shards.values():
        assert sum(t.numel() * t.element_size() for t in tensors.values()) <= 1 << 20
    home = {layer_key(n): f for f, tensors in shards.items() for n in tensors}
    for f, tensors in shards.items():
        assert all(home[layer_key(n)] == f for n in tensors)  # one shard per layer
    assert layer_key("model.layers.3.mlp.up_proj.weight") == "model.layers.3"
    assert layer_key("lm_head.weight") == "lm_head.weight"


def test_header_is_safetensors_with_8_byte_alignment(tmp_path):
    write_weights([("x", torch.arange(3, dtype=torch.float32))], tmp_path / "w")
    raw = (tmp_path / "w" / "model-00000.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert n % 8 == 0 and header["x"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
    assert raw[8 + n:] == torch.arange(3, dtype=torch.float32).numpy().tobytes()


def test_a_failed_write_leaves_the_previous_directory_whole(tmp_path):
    write_weights([("x", torch.zeros(2))], tmp_path / "w")

    def broken():
        yield "x", torch.ones(2)
        raise RuntimeError("the trainer failed mid-way")

    with pytest.raises(RuntimeError, match="mid-way"):
        write_weights(broken(), tmp_path / "w")
    assert torch.equal(read_dir(tmp_path / "w")["model-00000.safetensors"]["x"], torch.zeros(2))
    assert [p.name for p in tmp_path.iterdir()] == ["w"]  # no temporary left behind


def test_a_tensor_already_on_the_host_in_the_dtype_is_not_copied():
    t = torch.randn(4, 4)
    assert host_tensor(t, torch.float32).data_ptr() == t.data_ptr()
    converted = host_tensor(t, torch.bfloat16)
    assert converted.dtype == torch.bfloat16 and converted.data_ptr() != t.data_ptr()


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="weights dtype 'int8'; valid: float32, bfloat16"):
        write_weights([("x", torch.zeros(1))], tmp_path / "w", dtype="int8")
    with pytest.raises(ValueError, match="chunk_mb must be > 0"):
        write_weights([("x", torch.zeros(1))], tmp_path / "w", chunk_mb=0)
    with pytest.raises(ValueError, match="no tensors"):
        write_weights([], tmp_path / "w")


def test_weights_are_staged_in_memory_when_it_has_room_for_two_versions(tmp_path):
    import shutil
    import tempfile

    from scalerl.rollout.weight_files import staging_dir

    free = shutil.disk_usage(tmp_path).free
    assert staging_dir(None, free // 2 - 1, shm=tmp_path) == tmp_path  # the loaded + the next
    assert staging_dir(None, free, shm=tmp_path) == Path(tempfile.gettempdir())
    assert staging_dir(None, 1, shm=tmp_path / "absent") == Path(tempfile.gettempdir())
    assert staging_dir("/shared/w", 1, shm=tmp_path) == Path("/shared/w")
