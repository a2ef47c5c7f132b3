"""Optimizers: what turns a gradient into a step (Chapter 9).

``train_lm`` takes an optimizer *factory*, a picklable object that builds
the optimizer from the model once the model sits on its device. Each
parameter group the factory makes carries its own base rate in ``lr``;
the schedule then scales each group from its own base, so a factory can
give layers different rates (a parameterization such as muP does).
"""

from __future__ import annotations

import torch
import torch.nn as nn

# Part I's optimizer is the loop's default, kept beside it (see there).
from .training.recipe import AdamW

__all__ = ["AdamW", "UpdateRatio"]


class UpdateRatio:
    """A per-step measurement for ``train_lm(measure=...)``: how far each
    weight matrix moved in one update, relative to its size,
    ``||W_after - W_before|| / ||W_before||`` (Frobenius norms).

    Taken at every ``every``-th update only, since it copies the matrices
    before the step.
    """

    def __init__(self, every: int = 1):
        if every < 1:
            raise ValueError(f"every={every}: measure at least every step")
        self.every = every
        self._before: dict[str, torch.Tensor] = {}

    def before(self, step: int, model: nn.Module) -> None:
        self._before = {}
        if step % self.every == 0:
            self._before = {
                name: p.detach().clone()
                for name, p in model.named_parameters()
                if p.dim() >= 2
            }

    def after(
        self, step: int, model: nn.Module, logits, loss
    ) -> dict[str, float] | None:
        if not self._before:
            return None
        params = dict(model.named_parameters())
        ratios = {
            name: float((params[name].detach() - old).norm() / old.norm())
            for name, old in self._before.items()
        }
        self._before = {}
        return ratios
