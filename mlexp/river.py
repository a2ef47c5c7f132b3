"""A river valley: the smallest picture of why noisy steps must shrink
(Chapter 10).

The loss is ``along * x**2 / 2 + across * y**2 / 2`` with ``along`` much
smaller than ``across``: a steep-sided valley whose floor slopes gently
toward the minimum, like a river running to the sea. The gradient across
is noisy, as a minibatch's is. A large step runs down the river fast but
keeps bouncing between the banks; a small step sits near the floor but
crawls. Shrinking a large step at the end gets both.

Many walkers run at once, so the mean loss at each step is the expected
loss rather than one noisy path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["river_walk", "noise_floor"]


def noise_floor(rate: float, curvature: float, noise: float) -> float:
    """The loss that noisy gradient descent settles at in a quadratic bowl
    ``curvature * y**2 / 2`` whose gradient carries noise of standard
    deviation ``noise``: ``rate * noise**2 / (2 * (2 - rate * curvature))``.

    From the update ``y <- (1 - rate * curvature) * y - rate * noise * z``:
    its variance settles where ``v = (1 - rate * curvature)**2 v +
    rate**2 noise**2``. It grows with the rate, which is why a constant
    rate cannot reach the bottom.
    """
    if not 0 < rate * curvature < 2:
        raise ValueError(
            f"rate={rate} with curvature={curvature}: the walk only "
            "settles when rate * curvature lies between 0 and 2"
        )
    return rate * noise**2 / (2 * (2 - rate * curvature))


def river_walk(
    schedule: Callable[[int, int, float], float],
    peak: float,
    steps: int,
    along: float = 0.01,
    across: float = 1.0,
    noise: float = 1.0,
    start: tuple[float, float] = (10.0, 0.0),
    walkers: int = 4000,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """Run ``walkers`` copies of gradient descent with the rate
    ``schedule(step, steps, peak)``, the noise on the steep direction only.

    Returns the mean loss after each step, split into its part ``along``
    the river and its part ``across`` it (each of shape ``(steps,)``).
    """
    if along <= 0 or across <= 0:
        raise ValueError(
            f"along={along}, across={across}: both curvatures must be "
            "positive for the valley to have a bottom"
        )
    x = torch.full((walkers,), start[0], dtype=torch.float64)
    y = torch.full((walkers,), start[1], dtype=torch.float64)
    loss_along = torch.empty(steps, dtype=torch.float64)
    loss_across = torch.empty(steps, dtype=torch.float64)
    for step in range(steps):
        rate = schedule(step, steps, peak)
        z = torch.randn(walkers, generator=generator, dtype=torch.float64)
        x = x - rate * along * x
        y = y - rate * (across * y + noise * z)
        loss_along[step] = (along * x**2 / 2).mean()
        loss_across[step] = (across * y**2 / 2).mean()
    return {"along": loss_along, "across": loss_across}
