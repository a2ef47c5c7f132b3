"""Reading a learning-rate sweep: the best rate, and how far the rate can
move from it before the loss gets noticeably worse."""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["good_range"]


def good_range(
    losses: Mapping[float, float], band: float
) -> tuple[float, float, float]:
    """The rate with the lowest loss, and the lowest and highest rates at
    which the loss is within ``band`` of it, read off the straight lines
    between neighbouring rates on a log axis.

    A range that reaches the end of the sweep stops there: the sweep
    cannot say how far beyond it the loss stays good. A loss that is not
    finite (a run that diverged) counts as infinitely high.
    """
    if len(losses) < 2:
        raise ValueError("give the losses of at least two rates")
    if not band > 0:
        raise ValueError(f"band={band}: give a positive number of nats")
    rates = sorted(losses)
    loss = [
        losses[r] if math.isfinite(losses[r]) else math.inf for r in rates
    ]
    i = min(range(len(rates)), key=loss.__getitem__)
    limit = loss[i] + band

    def edge(step: int) -> float:
        j = i
        while 0 <= j + step < len(rates) and loss[j + step] <= limit:
            j += step
        if not 0 <= j + step < len(rates):
            return rates[j]  # the sweep ends inside the range
        a, b = math.log(rates[j]), math.log(rates[j + step])
        if math.isinf(loss[j + step]):
            return rates[j]
        share = (limit - loss[j]) / (loss[j + step] - loss[j])
        return math.exp(a + share * (b - a))

    return rates[i], edge(-1), edge(+1)
