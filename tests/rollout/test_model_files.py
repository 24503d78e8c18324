"""Hub ids resolve to their snapshot in the Hugging Face cache, offline too, everywhere a model
directory is read (the engine's weight checks included); a miss is one line naming the id."""

import json
import os
import subprocess
import sys

import pytest

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hugging Face cache holding `acme/tiny-tied` as the hub client lays it out."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cache = tmp_path_factory.mktemp("hub")
    repo = cache / "models--acme--tiny-tied"
    snapshot = repo / "snapshots" / COMMIT
    config = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


def offline(cache, code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (huggingface_hub reads HF_HUB_OFFLINE when imported)."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_hub_id_is_its_cached_snapshot_for_the_glue_and_the_engine_checks(hub_cache):
    proc = offline(hub_cache, """if True:
        import json
        from scalerl.models import resolve_model
        from scalerl.rollout.weights import checkpoint_shapes
        shapes = checkpoint_shapes("acme/tiny-tied")
        print(json.dumps({"dir": resolve_model("acme/tiny-tied"), "names": sorted(shapes),
                          "embed": shapes["model.embed_tokens.weight"]}))""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["dir"] == str(hub_cache / "models--acme--tiny-tied" / "snapshots" / COMMIT)
    assert out["embed"] == [32, 16]
    assert "lm_head.weight" not in out["names"]  # tied: the files hold the embedding only
    # embedding + one layer (q/k/v weights and biases, o, gate/up/down, 2 norms = 12) + norm
    assert len(out["names"]) == 14


def test_an_id_missing_from_the_cache_offline_is_one_line(hub_cache):
    proc = offline(hub_cache, """if True:
        from scalerl.rollout.model_files import ModelNotFoundError, model_dir
        try:
            model_dir("acme/absent")
        except ModelNotFoundError as exc:
            print(exc)""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert "\n" not in line
    assert line.startswith("model 'acme/absent': not in the Hugging Face cache (")
    assert "HF_HUB_OFFLINE is set" in line


def test_a_path_that_is_not_a_model_is_refused(tmp_path):
    from scalerl.rollout.model_files import ModelNotFoundError, model_dir

    with pytest.raises(ModelNotFoundError, match="no config.json there"):
        model_dir(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="no config.json there"):
        model_dir("./not/a/hub/id")


def test_checkpoint_shapes_refuses_a_model_without_safetensors(tmp_path):
    from scalerl.rollout.weights import checkpoint_shapes

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors files"):
        checkpoint_shapes(str(tmp_path))
