"""Calibration: whether a model's confidence matches how often it is right
(Chapter 8).

A model that gives its top guess probability 0.8 should be right about 80%
of the time. The measures here read that off held-out predictions: the
expected calibration error and its reliability bins (Guo et al., 2017), the
Brier score, and the single temperature that, dividing every logit, makes
the predictions most likely (temperature scaling, which leaves the top
guess, and so the accuracy, unchanged).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor

from .training.train import windows

__all__ = [
    "Calibration",
    "calibration",
    "fit_temperature",
    "held_out_logits",
]


@dataclasses.dataclass
class Calibration:
    """How well a set of predictions is calibrated.

    ``bins`` holds, for each confidence bin that received a prediction,
    ``(low, high, mean confidence, accuracy, count)``; ``ece`` is the
    count-weighted mean of ``|accuracy - confidence|`` over them.
    """

    ece: float
    brier: float
    accuracy: float
    confidence: float
    bins: list[tuple[float, float, float, float, int]]


def _flat(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets "
            f"{tuple(targets.shape)} do not match: give one row of logits "
            "per target, (..., vocab) against (...)"
        )
    # (..., vocab) -> (N, vocab), float64 so that sums over many
    # predictions do not round
    return logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(
        -1
    )


def calibration(
    logits: Tensor,
    targets: Tensor,
    bins: int = 15,
    temperature: float = 1.0,
) -> Calibration:
    """Calibration of the predictions ``softmax(logits / temperature)``
    against ``targets``, with ``bins`` equal-width confidence bins on
    [0, 1]."""
    if bins < 1:
        raise ValueError(
            f"bins={bins}: give at least one bin (15 is usual)"
        )
    if not temperature > 0:
        raise ValueError(
            f"temperature={temperature}: divide the logits by a positive "
            "number (1 leaves them as they are)"
        )
    z, y = _flat(logits, targets)
    p = (z / temperature).softmax(-1)
    confidence, guess = p.max(-1)
    correct = (guess == y).double()
    onehot = F.one_hot(y, p.shape[-1]).double()
    brier = (p - onehot).pow(2).sum(-1).mean()
    # bin b holds confidences in (b/bins, (b+1)/bins]; 0 falls in bin 0
    index = (confidence * bins).ceil().long().clamp(1, bins) - 1
    table, ece = [], 0.0
    for b in range(bins):
        inside = index == b
        n = int(inside.sum())
        if n == 0:
            continue
        conf, acc = (
            float(confidence[inside].mean()),
            float(correct[inside].mean()),
        )
        ece += n / len(y) * abs(acc - conf)
        table.append((b / bins, (b + 1) / bins, conf, acc, n))
    return Calibration(
        ece=ece,
        brier=float(brier),
        accuracy=float(correct.mean()),
        confidence=float(confidence.mean()),
        bins=table,
    )


def fit_temperature(logits: Tensor, targets: Tensor) -> float:
    """The temperature ``T > 0`` that minimizes the cross-entropy of
    ``softmax(logits / T)`` on these predictions (fit it on held-out text
    other than the text it is then scored on)."""
    z, y = _flat(logits, targets)
    z = z.detach()
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe"
    )

    def nll() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(z / log_t.exp(), y)
        loss.backward()
        return loss

    opt.step(nll)
    return float(log_t.detach().exp())


@torch.no_grad()
def held_out_logits(
    model: torch.nn.Module, starts: Tensor, ids: Tensor, block_size: int
) -> tuple[Tensor, Tensor]:
    """The model's logits (N, block_size, vocab) and the next tokens
    (N, block_size) on the windows of ``ids`` that begin at ``starts``
    (``mlexp.training.train.evaluation_starts`` gives the ones ``train_lm``
    scores), in evaluation mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    x, y = windows(ids, starts, block_size)  # (N, block_size) each
    logits = torch.cat(
        [
            model(x[i : i + 64].to(device))[0].cpu()
            for i in range(0, len(x), 64)
        ]
    )
    model.train(was_training)
    return logits, y
