"""Learning-rate schedules: how big a step is at each point of a run
(Chapter 10).

A schedule is a picklable object that ``train_lm`` calls as
``schedule(step, steps, base_lr)`` for every parameter group: the rate of
update ``step`` (counted from 0) in a run of ``steps`` updates, for a group
whose optimizer factory gave it the rate ``base_lr``. It sees each group's
base rate rather than returning a bare multiplier, so that a
parameterization's per-layer rates survive the schedule and the default
keeps Part I's arithmetic to the last bit: ``lr * (step + 1) / warmup`` is
not always the same float as ``lr * ((step + 1) / warmup)``.
"""

from __future__ import annotations

import math

__all__ = ["WarmupCosine"]


class WarmupCosine:
    """Linear warm-up over ``warmup`` steps, then a half cosine down to
    ``floor`` times the base rate at the last step: the schedule of every
    Part I run (40 steps, a floor of a tenth).

    Warm-up keeps Adam's first updates small while its running averages
    of the gradient still rest on a handful of batches (``warmup=0``
    starts at the full rate); the cosine shrinks the steps as the loss
    flattens, so noise stops undoing progress.
    """

    def __init__(self, warmup: int = 40, floor: float = 0.1):
        if warmup < 0:
            raise ValueError(
                f"warmup={warmup}: give a number of steps, 0 for no warm-up"
            )
        if not 0.0 <= floor <= 1.0:
            raise ValueError(
                f"floor={floor} is a fraction of the peak rate: give a "
                "value from 0 (decay to zero) to 1 (no decay)"
            )
        self.warmup = warmup
        self.floor = floor

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        if step < self.warmup:
            return base_lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, steps - self.warmup)
        return base_lr * (
            self.floor
            + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * progress))
        )

    def __repr__(self) -> str:
        return f"WarmupCosine(warmup={self.warmup}, floor={self.floor})"
