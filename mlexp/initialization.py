"""Initialization: where training starts (Chapter 11).

An initialization is a picklable object that ``train_lm(init=...)`` calls
on the model before it builds the optimizer, setting the weights in
place. It draws from its own generator, seeded through
:mod:`mlexp.training.seeds`, so a model gets the same start whether it
trains in this process or in a worker of ``train_side_by_side``. Without
one, a model keeps PyTorch's default initialization, as in Part I.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .training.seeds import shifted

__all__ = ["Normal"]


class Normal:
    """Every linear and embedding weight drawn from N(0, std^2), biases set
    to zero: GPT-2's initialization at its std of 0.02.

    PyTorch's defaults differ by layer (an embedding's rows have std 1, a
    linear layer's weights are uniform within 1/sqrt(fan-in)); one std for
    every matrix makes the starting scale a single knob.
    """

    def __init__(self, std: float = 0.02, seed: int = 0):
        if not std > 0:
            raise ValueError(
                f"std={std}: give a positive standard deviation"
            )
        self.std = std
        self.seed = seed

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        generator = torch.Generator().manual_seed(shifted(self.seed))
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                weight = module.weight
                # drawn on the CPU, so every device starts from the same
                # numbers
                draw = torch.randn(weight.shape, generator=generator)
                weight.copy_(draw * self.std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()

    def __repr__(self) -> str:
        return f"Normal(std={self.std}, seed={self.seed})"
