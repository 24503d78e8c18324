"""bf16 master weights at the recipe's learning rate are refused, in one line with the reason:
round-to-nearest drops a change below half an ulp, 2^-9 x |w| in bf16 (8 significant bits)."""

import pytest
import torch

from scalerl.trainer.config import FieldError, OptimConfig, PolicyConfig, TrainerConfig


def test_a_step_of_lr_is_lost_on_a_bf16_weight_and_the_config_says_so():
    w = torch.tensor(0.02, dtype=torch.bfloat16)
    assert w + 5e-7 == w  # the recipe's step rounds away (bf16 ulp at 0.02: 2^-13 = 1.2e-4)
    with pytest.raises(FieldError, match=r"^policy.dtype = 'bfloat16': master weights in "
                                         r"bfloat16 \(8 significant bits\) lose every AdamW "
                                         r"update at optim.lr = 5e-07"):
        TrainerConfig(policy=PolicyConfig(dtype="bfloat16"))
    # 0.02 x 2^-9 = 3.90625e-5: below is refused, above kept (fp16: 0.02 x 2^-12 = 4.9e-6)
    with pytest.raises(FieldError):
        TrainerConfig(policy=PolicyConfig(dtype="bfloat16"), optim=OptimConfig(lr=3.9e-5))
    TrainerConfig(policy=PolicyConfig(dtype="bfloat16"), optim=OptimConfig(lr=4e-5))
    with pytest.raises(FieldError, match="float16 \\(11 significant bits\\)"):
        TrainerConfig(policy=PolicyConfig(dtype="float16"), optim=OptimConfig(lr=4.8e-6))
    TrainerConfig(policy=PolicyConfig(dtype="float16"), optim=OptimConfig(lr=5e-6))
    TrainerConfig(policy=PolicyConfig(dtype="auto"))  # fp32 master weights: the recipe's
