"""The dry run's micro-batch balance: a step's rows packed as the trainer packs them
(trainer/balance.py) over the planned ranks, on an assumed spread of lengths.

`recipe_lengths` spreads a step's rows evenly (quantiles, no randomness): each a mean prompt plus
a completion between 0 and twice the mean completion (the scalerl recipe's stated mean, 7,168,
spreads them up to 14,336, its thinking cap plus answer budget). An assumption until a run's
`trainer/imbalance` and `trainer/micro_batches` measure it. `simulate_balance` plans the
micro-batches and `balance_lines` prints them. No GPU, no model, no tensors here.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.planning.sizing import ModelShape
from scalerl.planning.throughput import Workload, compute_params
from scalerl.trainer.balance import attention_cost, plan_micro_batches


@dataclass(frozen=True)
class Balance:
    """A step's micro-batches as the trainer would plan them."""

    rows: int
    """Rows of the step (rollouts)."""
    ranks: int
    """Trainer ranks the rows are dealt to."""
    micro_tokens: int
    """Most tokens per micro-batch (offpolicy.micro_batch_tokens)."""
    micro_batches: int
    """Micro-batches per rank (the same on every rank)."""
    imbalance: float
    """The step's cost over the ideal (trainer/balance.py `step_imbalance`)."""


def recipe_lengths(rows: int, prompt: int, completion: int) -> list[int]:
    """`rows` lengths: `prompt` plus completions at the quantiles (k + 1/2) / rows of an even
    spread over [0, 2 x `completion`] (their mean is `completion`)."""
    if rows < 1 or prompt < 0 or completion < 0:
        raise ValueError(f"recipe_lengths needs rows >= 1, prompt and completion >= 0, got "
                         f"{rows}, {prompt}, {completion}")
    return [max(1, prompt + round((k + 0.5) / rows * 2 * completion)) for k in range(rows)]


def simulate_balance(shape: ModelShape, work: Workload, ranks: int,
                     micro_tokens: int) -> Balance:
    """The micro-batches of one step of `work` (its rollouts, `recipe_lengths`) over `ranks`
    trainer ranks at `micro_tokens` tokens each, rows weighed by `shape`'s attention cost."""
    lengths = recipe_lengths(work.rollouts_per_step, work.prompt_tokens, work.completion_tokens)
    attention = attention_cost(shape.layers, shape.heads * shape.head_dim, compute_params(shape))
    plan = plan_micro_batches(lengths, ranks, micro_tokens, attention)
    return Balance(rows=len(lengths), ranks=ranks, micro_tokens=micro_tokens,
                   micro_batches=plan.count, imbalance=plan.imbalance)


def balance_lines(shape: ModelShape, work: Workload | None, ranks: int, micro_tokens: int,
                  packed: bool) -> list[str]:
    """The dry run's one line on the balance of packed micro-batches across ranks (none for
    padded rows, or without a workload)."""
    if work is None or not packed:
        return []
    b = simulate_balance(shape, work, ranks, micro_tokens)
    return [f"micro-batches: {b.micro_batches} per rank, imbalance {b.imbalance:.3f} over "
            f"{b.ranks} ranks (the step's cost over the ideal; {b.rows} rows spread evenly to "
            f"twice the mean completion, an assumption: trainer/imbalance measures it)"]
