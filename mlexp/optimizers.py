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

__all__ = ["AdamW", "UpdateRatio"]


class AdamW:
    """PyTorch's AdamW with Part I's settings: betas 0.9 and 0.99, weight
    decay on the matrices only.

    Decay pulls weights toward zero in proportion to their size. The gains
    of the norms (vectors) are left alone: shrinking a gain toward zero
    would only fight the norm it scales.
    """

    def __init__(
        self,
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.1,
    ):
        if not lr > 0:
            raise ValueError(f"lr={lr}: a learning rate must be positive")
        if weight_decay < 0:
            raise ValueError(
                f"weight_decay={weight_decay}: give 0 for no decay, or a "
                "positive coefficient"
            )
        self.lr = lr
        self.betas = betas
        self.weight_decay = weight_decay

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [
            {
                "params": [p for p in params if p.dim() >= 2],
                "weight_decay": self.weight_decay,
            },
            {
                "params": [p for p in params if p.dim() < 2],
                "weight_decay": 0.0,
            },
        ]
        on_cuda = any(p.is_cuda for p in params)
        return torch.optim.AdamW(
            groups, lr=self.lr, betas=self.betas, fused=on_cuda or None
        )

    def __repr__(self) -> str:
        return (
            f"AdamW(lr={self.lr}, betas={self.betas}, "
            f"weight_decay={self.weight_decay})"
        )


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
