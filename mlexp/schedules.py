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

# Part I's schedule is the loop's default, kept beside it (see there).
from .training.recipe import WarmupCosine

__all__ = ["WarmupCosine"]
