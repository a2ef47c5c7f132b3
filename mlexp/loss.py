"""The loss: what number training pushes down (Chapter 8).

An objective is a module that ``train_lm`` calls on the model's logits
(B, T, vocab) and the next tokens (B, T), returning one number to
minimize. Whatever auxiliary loss the model adds (a Mixture of Experts'
balancing term, Chapter 5) is added on top by ``train_lm``, so an
objective only scores predictions. The number a chapter *reports* stays
plain cross-entropy on held-out text, whatever was trained.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

# Part I's objective is the loop's default, kept beside it (see there).
from .training.recipe import CrossEntropy, auxiliary_loss

__all__ = [
    "CrossEntropy",
    "LabelSmoothing",
    "LogitStats",
    "SoftCap",
    "SquaredError",
    "ZLoss",
    "auxiliary_loss",
    "soft_cap",
]


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


class SquaredError(nn.Module):
    """The squared distance between the predicted distribution and the
    one-hot target, summed over the vocabulary and averaged over positions
    (the Brier score of every prediction).

    Its gradient with respect to a logit is ``J^T 2(p - y)``, where ``J``
    is the softmax's Jacobian: every term carries a factor ``p``, so a
    confident wrong prediction (``p_y`` near 0) barely pushes back, where
    cross-entropy's ``p - y`` pushes hardest.
    """

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        # (B, T, vocab) -> (B * T, vocab)
        p = logits.flatten(0, 1).softmax(-1)
        y = F.one_hot(targets.flatten(), p.shape[-1]).to(p.dtype)
        return (p - y).pow(2).sum(-1).mean()


class ZLoss(nn.Module):
    """Cross-entropy plus ``coef * mean(log Z ** 2)``, where ``log Z`` is
    the logsumexp of a position's logits.

    The softmax ignores a constant added to every logit, so nothing in
    cross-entropy holds ``log Z`` anywhere; the extra term pulls it toward
    0, where the logits are themselves log-probabilities. Devlin et al.
    (2014) used such a penalty to skip normalizing at test time; Mesh
    TensorFlow named it z-loss (Shazeer, 2018, with 1e-4 as its example),
    and PaLM trained with 1e-4 for stability.
    """

    def __init__(self, coef: float = 1e-4):
        super().__init__()
        if not coef >= 0:
            raise ValueError(
                f"coef={coef}: the z-loss coefficient must be 0 or more "
                "(1e-4 is PaLM's; 0 is plain cross-entropy)"
            )
        self.coef = coef

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        flat = logits.flatten(0, 1)  # (B * T, vocab)
        log_z = flat.logsumexp(-1)
        ce = F.cross_entropy(flat, targets.flatten())
        return ce + self.coef * log_z.pow(2).mean()

    def extra_repr(self) -> str:
        return f"coef={self.coef}"


def soft_cap(logits: Tensor, cap: float) -> Tensor:
    """``cap * tanh(logits / cap)``: nearly the identity for logits well
    below ``cap``, and never beyond ``±cap`` (Gemma 2 caps its final logits
    at 30). It keeps each logit's order, so the most likely token stays
    the most likely."""
    _check_cap(cap)
    return cap * torch.tanh(logits / cap)


def _check_cap(cap: float) -> None:
    if not cap > 0:
        raise ValueError(
            f"cap={cap}: a soft cap must be a positive logit size "
            "(Gemma 2 uses 30 for its final logits)"
        )


class SoftCap(nn.Module):
    """An objective scored on soft-capped logits: ``inner(soft_cap(logits,
    cap), targets)``, cross-entropy by default.

    A cap is part of the model, not only of training: a model trained
    capped must be read capped, which :func:`soft_cap` does for evaluation
    and sampling.
    """

    def __init__(self, cap: float = 30.0, inner: nn.Module | None = None):
        super().__init__()
        _check_cap(cap)
        self.cap = cap
        self.inner = CrossEntropy() if inner is None else inner

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return self.inner(soft_cap(logits, self.cap), targets)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"


class LogitStats:
    """A per-step measurement for ``train_lm(measure=...)``: the largest
    logit in the batch and the mean log-normalizer ``log Z = logsumexp``
    of the logits, the two numbers z-loss and soft-capping act on, and
    the mean logit, which tells a shift of every logit (the mean moves
    with log Z) from a spread (log Z moves away from the mean)."""

    def before(self, step: int, model: nn.Module) -> None:
        pass

    def after(
        self, step: int, model: nn.Module, logits: Tensor, loss: Tensor
    ) -> dict[str, float]:
        logits = logits.detach()
        return {
            "max_logit": float(logits.max()),
            "log_z": float(logits.logsumexp(-1).mean()),
            "mean_logit": float(logits.mean()),
        }
