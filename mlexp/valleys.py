"""Toy valleys: losses of two weights, on which an optimizer's path can be
drawn (Chapter 9).

A network's loss is a surface over millions of weights; these have two,
so every step can be plotted on the contours. The thin valley is the
shape that makes plain gradient descent slow: steep across, nearly flat
along. Turned by 45 degrees it is the same valley, and an optimizer that
treats every weight alike does exactly as well in both; one that scales
each weight on its own (Adam) does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["ThinValley", "Rosenbrock", "descend", "best_rate"]

Loss = Callable[[Tensor], Tensor]
MakeOptimizer = Callable[[list[Tensor], float], torch.optim.Optimizer]


class ThinValley:
    """``f(w) = (a u_1^2 + b u_2^2) / 2``, where ``u`` is ``w`` turned by
    ``angle`` degrees: curvature ``a`` along the floor, ``b`` across it.
    The minimum is 0, at the origin."""

    def __init__(
        self,
        curvatures: tuple[float, float] = (1.0, 100.0),
        angle: float = 0.0,
    ):
        if min(curvatures) <= 0:
            raise ValueError(
                f"curvatures={curvatures}: give two positive numbers, the "
                "floor's and the walls'"
            )
        self.curvatures, self.angle = curvatures, angle
        c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        # columns: the floor's direction and the walls' direction
        self.axes = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
        # far along the floor and a little up one wall
        self.start = (
            self.axes @ torch.tensor([-1.0, 0.1]).double()
        ).tolist()

    def __call__(self, w: Tensor) -> Tensor:
        u = w @ self.axes.to(w.dtype)  # (..., 2): along, across
        a, b = self.curvatures
        return 0.5 * (a * u[..., 0] ** 2 + b * u[..., 1] ** 2)


class Rosenbrock:
    """``(1 - x)^2 + 100 (y - x^2)^2``: a curved valley whose floor bends
    round to its minimum, 0 at (1, 1) (Rosenbrock, 1960)."""

    start = (-1.0, 1.5)

    def __call__(self, w: Tensor) -> Tensor:
        x, y = w[..., 0], w[..., 1]
        return (1 - x) ** 2 + 100 * (y - x**2) ** 2


def descend(
    loss: Loss, make_optimizer: MakeOptimizer, lr: float, steps: int, start
) -> Tensor:
    """The path of ``steps`` updates from ``start``, in float64: a tensor
    of shape (steps + 1, 2), the start first."""
    w = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    optimizer = make_optimizer([w], lr)
    path = [w.detach().clone()]
    for _ in range(steps):
        optimizer.zero_grad()
        loss(w).backward()
        optimizer.step()
        path.append(w.detach().clone())
    return torch.stack(path)


def best_rate(
    loss: Loss,
    make_optimizer: MakeOptimizer,
    rates: Sequence[float],
    steps: int,
    start,
) -> tuple[float, Tensor, float]:
    """The rate among ``rates`` whose path ends lowest, with that path and
    its final loss. A path that leaves the float range counts as
    infinitely high."""
    best = (math.nan, torch.empty(0), math.inf)
    for lr in rates:
        path = descend(loss, make_optimizer, lr, steps, start)
        final = float(loss(path[-1]))
        if math.isfinite(final) and final < best[2]:
            best = (lr, path, final)
    if not math.isfinite(best[2]):
        raise ValueError(
            f"every rate in {list(rates)} diverged: try smaller rates"
        )
    return best
