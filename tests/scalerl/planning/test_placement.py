"""Which GPUs train and which generate on one node, and how many there are without starting CUDA
(the rule; no GPU needed to check it)."""

import os

import pytest

from scalerl.planning.placement import (
    Placement,
    PlacementError,
    apply_to_trainer,
    check_cuda_view,
    engine_env,
    gpu_count,
    plan_placement,
    visible_gpus,
)

EIGHT = [str(i) for i in range(8)]


def test_default_engine_takes_the_gpus_after_the_trainer_ranks():
    p = plan_placement(EIGHT, ranks=6, tp=2)
    assert p == Placement(train=("0", "1", "2", "3", "4", "5"), generate=("6", "7"))
    assert p.shared == () and p.held(world=6) == 8 and "shared" not in p.describe()


def test_with_no_gpu_to_spare_the_engine_shares_the_first_and_says_so():
    p = plan_placement(["0"], ranks=1, tp=1)  # one GPU: trainer and vLLM both on it
    assert p == Placement(train=("0",), generate=("0",))
    assert p.shared == ("0",) and p.held(world=1) == 1
    assert "shared with trainer ranks" in p.describe()
    assert plan_placement(EIGHT, ranks=8, tp=2).generate == ("0", "1")


def test_named_engine_devices_are_taken_out_of_the_trainer_gpus():
    p = plan_placement(EIGHT, ranks=6, tp=2, devices=(0, 1))
    assert p.train == ("2", "3", "4", "5", "6", "7") and p.generate == ("0", "1")
    # indices are into the launcher's visible list (CUDA_VISIBLE_DEVICES=4,5,6,7)
    p = plan_placement(["4", "5", "6", "7"], ranks=3, tp=1, devices=(0,))
    assert p.train == ("5", "6", "7") and p.generate == ("4",)
    # multi-node: 16 ranks over 2 nodes, the engine's GPU counted once
    assert plan_placement(EIGHT, ranks=7, tp=1).held(world=14) == 15


@pytest.mark.parametrize(("ranks", "tp", "devices", "message"), [
    (9, 1, None, "9 trainer processes on this node but 8 GPUs visible"),
    (4, 9, None, "tensor_parallel_size = 9 but 8 GPUs visible"),
    (4, 2, (7,), "need 2 distinct GPU indices in 0..7"),
    (4, 1, (8,), "need 1 distinct GPU indices in 0..7"),
    (4, 2, (3, 3), "need 2 distinct"),
])
def test_impossible_layouts_are_one_line_errors(ranks, tp, devices, message):
    with pytest.raises(PlacementError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_placement(EIGHT, ranks=ranks, tp=tp, devices=devices)


def test_nccl_weight_transfer_refuses_an_engine_sharing_a_trainer_gpu():
    with pytest.raises(PlacementError, match="needs the engine on GPUs of its own, but GPU 0 "):
        plan_placement(["0"], ranks=1, tp=1, exclusive=True)
    assert plan_placement(EIGHT, ranks=7, tp=1, exclusive=True).generate == ("7",)


def test_visible_gpus_follow_the_launcher():
    assert visible_gpus(4, None) == ["0", "1", "2", "3"]
    assert visible_gpus(2, "3, 5") == ["3", "5"]


def test_trainer_and_engine_see_their_own_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    p = plan_placement(["0", "1", "2", "3"], ranks=3, tp=1, devices=(0,))
    apply_to_trainer(p)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2,3"
    with engine_env(p):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2,3"
    with engine_env(None):  # CPU: nothing changes
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2,3"


def test_by_default_the_spare_gpus_become_engines_of_their_own():
    p = plan_placement(EIGHT, ranks=4, tp=1)  # PipelineRL's 4:4
    assert p.train == ("0", "1", "2", "3") and p.engines == 4
    assert p.engine_gpus() == [("4",), ("5",), ("6",), ("7",)] and p.held(world=4) == 8
    assert "4 vLLM engines (local servers) on GPU 4; 5; 6; 7" in p.describe()
    assert plan_placement(EIGHT, ranks=4, tp=2).engine_gpus() == [("4", "5"), ("6", "7")]
    assert plan_placement(EIGHT, ranks=3, tp=2).engine_gpus() == [("3", "4"), ("5", "6")]
    assert plan_placement(EIGHT, ranks=7, tp=1).engines == 1  # one GPU left: one engine


def test_a_set_number_of_engines_takes_that_many_and_no_more():
    p = plan_placement(EIGHT, ranks=4, tp=1, engines=2)
    assert p.generate == ("4", "5") and p.engines == 2 and p.held(world=4) == 6
    p = plan_placement(EIGHT, ranks=2, tp=1, devices=(6, 7), engines=2)
    assert p.train == ("0", "1") and p.engine_gpus() == [("6",), ("7",)]
    with pytest.raises(PlacementError, match=r"data_parallel_size = 5 engines of 1 GPUs need "
                                              r"5 GPUs, but 4 trainer ranks leave 4"):
        plan_placement(EIGHT, ranks=4, tp=1, engines=5)
    with pytest.raises(PlacementError, match=r"need 4 distinct GPU indices .* x 2 engines"):
        plan_placement(EIGHT, ranks=2, tp=2, devices=(6, 7), engines=2)


def test_gpus_are_counted_without_cuda(tmp_path, monkeypatch):
    from scalerl.planning import placement

    assert gpu_count({"CUDA_VISIBLE_DEVICES": "2,3"}) == 2  # the launcher's view
    assert gpu_count({"CUDA_VISIBLE_DEVICES": ""}) == 0  # CUDA's: none visible
    monkeypatch.setattr(placement, "_nvml_count", lambda: -1)  # a node without NVML
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / name).touch()
    assert gpu_count({}, dev=tmp_path) == 2  # the device nodes, not the control ones
    assert gpu_count({}, dev=tmp_path / "none") == 0
    monkeypatch.setattr(placement, "_nvml_count", lambda: 8)
    assert gpu_count({}, dev=tmp_path) == 8  # NVML, where it answers


def test_once_cuda_has_started_it_must_see_the_gpus_counted():
    p = plan_placement(["0", "1", "2", "3"], ranks=2, tp=1)
    check_cuda_view(p, 2)
    with pytest.raises(PlacementError, match=r"counted the trainer's GPUs as 0,1 .* but CUDA "
                                              r"sees 4 device\(s\)"):
        check_cuda_view(p, 4)


def test_the_trainer_allocator_grows_segments_unless_the_user_chose_and_engines_keep_theirs(
        monkeypatch):
    from scalerl.planning import placement

    monkeypatch.setattr(placement, "_set_here", False)
    assert placement.trainer_allocator({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}) \
        is False  # the user's setting stays, and the engines get it too
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert placement.trainer_allocator() is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    with engine_env(plan_placement(["0", "1"], ranks=1, tp=1)):
        assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ  # vLLM allocates its own way
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
