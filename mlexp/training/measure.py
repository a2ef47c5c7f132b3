"""What ``train_lm(measure=...)`` calls at each update, for numbers a
chapter wants per step (the largest logit, how far a matrix moved).

A measure looks at the model just before an update and returns its
numbers just after; ``train_lm`` keeps them in ``history["measures"]``,
which comes back from worker processes like the losses do. Unused, it
costs the loop two comparisons with None per step.
"""

from __future__ import annotations

from typing import Protocol

import torch.nn as nn
from torch import Tensor

__all__ = ["Measure"]


class Measure(Protocol):
    def before(self, step: int, model: nn.Module) -> None:
        """Called before update ``step`` (counted from 0) changes the
        weights."""

    def after(
        self, step: int, model: nn.Module, logits: Tensor, loss: Tensor
    ) -> dict[str, float] | None:
        """Called after the update, with the logits and loss of its batch;
        returns the numbers to keep, or None for none at this step."""
