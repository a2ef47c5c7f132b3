"""Optimizers: what turns a gradient into a step (Chapter 9).

``train_lm`` takes an optimizer *factory*, a picklable object that builds
the optimizer from the model once the model sits on its device. Each
parameter group the factory makes carries its own base rate in ``lr``;
the schedule then scales each group from its own base, so a factory can
give layers different rates (a parameterization such as muP does).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch import Tensor

# Part I's optimizer is the loop's default, kept beside it (see there).
from .training.recipe import AdamW

__all__ = [
    "Adam",
    "AdamW",
    "Muon",
    "MuonHybrid",
    "SGD",
    "UpdateRatio",
    "UpdateStats",
    "newton_schulz",
    "state_bytes",
]

# Jordan et al.'s quintic: steep at 0, so five steps lift most singular
# values of a normalized matrix to near 1, not exactly to 1
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def _check_rate(lr: float, name: str = "lr") -> None:
    if not lr > 0:
        raise ValueError(f"{name}={lr}: a learning rate must be positive")


def _check_decay(weight_decay: float) -> None:
    if weight_decay < 0:
        raise ValueError(
            f"weight_decay={weight_decay}: give 0 for no decay, or a "
            "positive coefficient"
        )


def _by_shape(model: nn.Module, decay: float) -> list[dict]:
    """Part I's two groups: the matrices, decayed, and the vectors (norm
    gains), not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {
            "params": [p for p in params if p.dim() >= 2],
            "weight_decay": decay,
        },
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


class SGD:
    """Stochastic gradient descent, with heavy-ball momentum (Polyak) or
    Nesterov's, as PyTorch's ``torch.optim.SGD`` computes them: the step is
    ``lr * v`` with ``v <- momentum * v + g``."""

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ):
        _check_rate(lr)
        _check_decay(weight_decay)
        if not 0 <= momentum < 1:
            raise ValueError(
                f"momentum={momentum}: give a share in [0, 1) "
                "(0.9 is usual)"
            )
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs a momentum above 0")
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.weight_decay = weight_decay

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            _by_shape(model, self.weight_decay),
            lr=self.lr,
            momentum=self.momentum,
            nesterov=self.nesterov,
        )

    def __repr__(self) -> str:
        return (
            f"SGD(lr={self.lr}, momentum={self.momentum}, "
            f"nesterov={self.nesterov}, weight_decay={self.weight_decay})"
        )


class Adam:
    """Adam with *coupled* L2 decay: ``l2 * w`` is added to the gradient of
    each matrix before Adam divides by ``sqrt(v)``, which is the gradient of
    ``l2 / 2 * ||w||^2`` added to the loss (PyTorch's
    ``Adam(weight_decay=...)``). AdamW, by contrast, shrinks the weights
    outside Adam's rescaling (Loshchilov and Hutter, 2019)."""

    def __init__(
        self,
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        l2: float = 0.0,
    ):
        _check_rate(lr)
        _check_decay(l2)
        self.lr, self.betas, self.l2 = lr, betas, l2

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            _by_shape(model, self.l2), lr=self.lr, betas=self.betas
        )

    def __repr__(self) -> str:
        return f"Adam(lr={self.lr}, betas={self.betas}, l2={self.l2})"


def newton_schulz(g: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """An approximately orthogonal matrix with ``g``'s singular vectors:
    ``U S' V^T`` for ``g = U S V^T``, by ``steps`` of Jordan et al.'s
    quintic Newton-Schulz iteration, in ``g``'s own precision (float32 in
    this book, where PyTorch's Muon works in bfloat16). Each step applies
    the same odd polynomial to every singular value, which lifts most of
    them to somewhere near 1 (Jordan et al.'s code says 0.5 to 1.5), not
    exactly to 1; a very small one can stay small."""
    if g.dim() != 2:
        raise ValueError(
            f"newton_schulz takes a matrix, got shape {tuple(g.shape)}"
        )
    a, b, c = NS_COEFFICIENTS
    wide = g.shape[0] <= g.shape[1]
    x = (
        g if wide else g.T
    )  # (rows <= cols): the Gram matrix is the small one
    x = x / x.norm().clamp(min=eps)  # every singular value now at most 1
    for _ in range(steps):
        gram = x @ x.T  # (rows, rows)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.T


class Muon(torch.optim.Optimizer):
    """Muon (Jordan et al., 2024) on the groups marked ``muon=True``, AdamW
    on the others, in one optimizer so that ``train_lm``'s schedule scales
    every group from its own base rate.

    A Muon step takes the Nesterov momentum of the gradient, replaces it by
    an approximately orthogonal matrix with the same singular vectors
    (:func:`newton_schulz`), and moves the weight by ``lr * sqrt(max(1,
    rows / cols))`` times that. Every direction of the update then has
    about the same size, however unequal the gradient's were.
    """

    def __init__(
        self,
        groups: list[dict],
        lr: float = 0.02,
        momentum: float = 0.95,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
    ):
        _check_rate(lr)
        _check_decay(weight_decay)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            ns_steps=ns_steps,
            muon=False,
        )
        super().__init__(groups, defaults)
        for group in self.param_groups:
            bad = [tuple(p.shape) for p in group["params"] if p.dim() != 2]
            if group["muon"] and bad:
                raise ValueError(
                    f"Muon orthogonalizes matrices, and was handed "
                    f"parameters of shapes {bad}: put vectors, embeddings "
                    "and the head in a group with muon=False (AdamW)"
                )

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if group["muon"]:
                    self._muon(p, group)
                else:
                    self._adamw(p, group)
        return loss

    def _muon(self, p: Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["momentum"] = torch.zeros_like(p)
        buf, mu = state["momentum"], group["momentum"]
        buf.lerp_(p.grad, 1 - mu)  # buf <- mu buf + (1 - mu) g
        update = p.grad.lerp(buf, mu)  # Nesterov: look one step ahead
        update = newton_schulz(update, group["ns_steps"])
        scale = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update, alpha=-group["lr"] * scale)

    def _adamw(self, p: Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["m"] = torch.zeros_like(p)
            state["v"] = torch.zeros_like(p)
        state["step"] += 1
        (b1, b2), t = group["betas"], state["step"]
        state["m"].lerp_(p.grad, 1 - b1)
        state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        # bias correction: the averages start at 0
        m_hat = state["m"] / (1 - b1**t)
        v_hat = state["v"] / (1 - b2**t)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.addcdiv_(
            m_hat, v_hat.sqrt().add_(group["eps"]), value=-group["lr"]
        )


class MuonHybrid:
    """Muon for the blocks' weight matrices, AdamW for everything else (the
    embedding, the output head, the norms' gains), the split Jordan et al.
    recommend: Muon suits hidden matrices, whose inputs and outputs are
    both spread-out vectors; an embedding row is a lookup, not a map.
    Attention's query, key and value weights are one matrix here and are
    orthogonalized whole (Jordan et al. found treating them apart
    better). The decay applies to the Muon matrices only."""

    def __init__(
        self,
        lr: float = 0.02,
        adam_lr: float = 3e-3,
        momentum: float = 0.95,
        weight_decay: float = 0.0,
    ):
        _check_rate(lr)
        _check_rate(adam_lr, "adam_lr")
        _check_decay(weight_decay)
        self.lr, self.adam_lr, self.momentum = lr, adam_lr, momentum
        self.weight_decay = weight_decay

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        named = [
            (n, p) for n, p in model.named_parameters() if p.requires_grad
        ]
        hidden = [
            p for n, p in named if n.startswith("blocks.") and p.dim() == 2
        ]
        ids = {id(p) for p in hidden}
        rest = [p for _, p in named if id(p) not in ids]
        return Muon(
            [
                {"params": hidden, "muon": True, "lr": self.lr},
                {
                    "params": rest,
                    "muon": False,
                    "lr": self.adam_lr,
                    "weight_decay": 0.0,
                },
            ],
            momentum=self.momentum,
            weight_decay=self.weight_decay,
        )

    def __repr__(self) -> str:
        return (
            f"MuonHybrid(lr={self.lr}, adam_lr={self.adam_lr}, "
            f"momentum={self.momentum}, weight_decay={self.weight_decay})"
        )


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors an optimizer keeps between steps (momenta,
    second moments), leaving out the step counters."""
    return sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for key, value in state.items()
        if isinstance(value, Tensor) and key != "step"
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


class UpdateStats:
    """A measurement for ``train_lm(measure=...)`` at chosen updates: for
    each weight matrix, the RMS of its update and of the weight before it,
    and the update's stable rank ``||dW||_F^2 / ||dW||_2^2`` (1 for an
    update along one direction, up to the matrix's smaller side when every
    direction moves alike, as an orthogonalized Muon step nearly does)."""

    def __init__(self, steps: tuple[int, ...] = (10, 50, 200)):
        if not steps or min(steps) < 0:
            raise ValueError(
                f"steps={steps}: give the updates to measure, "
                "counted from 0"
            )
        self.steps = set(steps)
        self._before: dict[str, Tensor] = {}

    def before(self, step: int, model: nn.Module) -> None:
        self._before = {}
        if step in self.steps:
            self._before = {
                name: p.detach().clone()
                for name, p in model.named_parameters()
                if p.dim() == 2
            }

    def after(
        self, step: int, model: nn.Module, logits, loss
    ) -> dict[str, dict[str, float]] | None:
        if not self._before:
            return None
        params = dict(model.named_parameters())
        stats = {}
        for name, old in self._before.items():
            update = params[name].detach() - old
            spectral = torch.linalg.matrix_norm(update, ord=2)
            stats[name] = {
                "update_rms": float(update.pow(2).mean().sqrt()),
                "weight_rms": float(old.pow(2).mean().sqrt()),
                "stable_rank": float(update.pow(2).sum() / spectral.pow(2))
                if spectral > 0
                else 0.0,
            }
        self._before = {}
        return stats
