"""Part I's recipe: the objective, optimizer and schedule ``train_lm``
uses when a chapter passes none.

They live here, beside the loop, rather than in the modules of Part II's
chapters that re-export them (:mod:`mlexp.loss`, :mod:`mlexp.optimizers`,
:mod:`mlexp.schedules`), so that a Part I chapter's run depends only on
the recipe it used: adding an objective to ``mlexp.loss`` does not touch
what Part I's kernels load, and so does not execute Part I again.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = ["AdamW", "CrossEntropy", "WarmupCosine", "auxiliary_loss"]


class CrossEntropy(nn.Module):
    """The mean of ``-log p(next token)`` over every position: the loss of
    every Part I run."""

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        # (B, T, vocab) -> (B * T, vocab): every position counts once
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def auxiliary_loss(model: nn.Module) -> Tensor | float:
    """The sum of the ``aux_loss`` every sub-module recorded in the last
    forward pass (0 if none does), in the model's module order."""
    return sum(
        m.aux_loss
        for m in model.modules()
        if isinstance(getattr(m, "aux_loss", None), Tensor)
    )


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
