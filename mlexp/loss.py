"""The loss: what number training pushes down (Chapter 8).

An objective is a module that ``train_lm`` calls on the model's logits
(B, T, vocab) and the next tokens (B, T), returning one number to
minimize. Whatever auxiliary loss the model adds (a Mixture of Experts'
balancing term, Chapter 5) is added on top by ``train_lm``, so an
objective only scores predictions. The number a chapter *reports* stays
plain cross-entropy on held-out text, whatever was trained.
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

# Part I's objective is the loop's default, kept beside it (see there).
from .training.recipe import CrossEntropy, auxiliary_loss

__all__ = ["CrossEntropy", "LabelSmoothing", "LogitStats", "auxiliary_loss"]


class LabelSmoothing(nn.Module):
    """Cross-entropy against a target that keeps ``1 - eps`` on the next
    token and spreads ``eps`` evenly over the whole vocabulary (Szegedy et
    al., 2016), so the model is never asked for certainty."""

    def __init__(self, eps: float = 0.1):
        super().__init__()
        if not 0.0 <= eps < 1.0:
            raise ValueError(
                f"eps={eps}: label smoothing takes a share in [0, 1) "
                "(0 is plain cross-entropy; 0.1 is the usual choice)"
            )
        self.eps = eps

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1),
            targets.flatten(),
            label_smoothing=self.eps,
        )

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


class LogitStats:
    """A per-step measurement for ``train_lm(measure=...)``: the largest
    logit in the batch and the mean log-normalizer ``log Z = logsumexp``
    of the logits, the two numbers z-loss and soft-capping act on."""

    def before(self, step: int, model: nn.Module) -> None:
        pass

    def after(
        self, step: int, model: nn.Module, logits: Tensor, loss: Tensor
    ) -> dict[str, float]:
        logits = logits.detach()
        return {
            "max_logit": float(logits.max()),
            "log_z": float(logits.logsumexp(-1).mean()),
        }
