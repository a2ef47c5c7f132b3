"""Learning-rate schedules: how big a step is at each point of a run
(Chapter 10).

A schedule is a picklable object that ``train_lm`` calls as
``schedule(step, steps, base_lr)`` for every parameter group: the rate of
update ``step`` (counted from 0) in a run of ``steps`` updates, for a group
whose optimizer factory gave it the rate ``base_lr``. It sees each group's
base rate rather than returning a bare multiplier, so that a
parameterization's per-layer rates survive the schedule and the default
keeps Part I's arithmetic to the last bit: ``lr * (step + 1) / warmup`` is
not always the same float as ``lr * ((step + 1) / warmup)``.

Every schedule here starts with the same linear warm-up, so that all of
them agree with a constant run until they begin to decay: a decay can then
branch from a checkpoint of the constant run (``train_lm(start=...)``)
instead of training the shared steps again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

# Part I's schedule is the loop's default, kept beside it (see there).
from .training.recipe import WarmupCosine

__all__ = [
    "Constant",
    "WarmupCosine",
    "WarmupLinear",
    "StepDecay",
    "WSD",
    "InverseSqrt",
    "linear",
    "one_minus_sqrt",
    "cosine",
]


def _check_warmup(warmup: int) -> None:
    if warmup < 0:
        raise ValueError(
            f"warmup={warmup}: give a number of steps, 0 for no warm-up"
        )


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"{name}={value} is a fraction of the peak rate: give a value "
            "from 0 (decay to zero) to 1 (no decay)"
        )


def _warm(step: int, warmup: int, base_lr: float) -> float:
    # Part I's arithmetic (see the module's docstring)
    return base_lr * (step + 1) / warmup


class Constant:
    """Warm-up, then the peak rate to the end: the trunk that decays
    branch from."""

    def __init__(self, warmup: int = 40):
        _check_warmup(warmup)
        self.warmup = warmup

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        if step < self.warmup:
            return _warm(step, self.warmup, base_lr)
        return base_lr

    def __repr__(self) -> str:
        return f"Constant(warmup={self.warmup})"


class WarmupLinear:
    """Warm-up, then a straight line from the peak toward ``floor`` times
    the peak, reached one step after the last (``floor=0``: linear to
    zero, so the last update is the smallest, not a wasted zero)."""

    def __init__(self, warmup: int = 40, floor: float = 0.0):
        _check_warmup(warmup)
        _check_fraction("floor", floor)
        self.warmup = warmup
        self.floor = floor

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        if step < self.warmup:
            return _warm(step, self.warmup, base_lr)
        progress = (step - self.warmup) / max(1, steps - self.warmup)
        return base_lr * (self.floor + (1 - self.floor) * (1 - progress))

    def __repr__(self) -> str:
        return f"WarmupLinear(warmup={self.warmup}, floor={self.floor})"


class StepDecay:
    """Warm-up, the peak, then drops: ``factors[i]`` times the peak from
    the fraction ``at[i]`` of the run on. The default is DeepSeek LLM's:
    31.6% of the peak after 80% of the run, 10% after 90%."""

    def __init__(
        self,
        warmup: int = 40,
        at: Sequence[float] = (0.8, 0.9),
        factors: Sequence[float] = (0.316, 0.1),
    ):
        _check_warmup(warmup)
        if len(at) != len(factors):
            raise ValueError(
                f"{len(at)} drops at {tuple(at)} but {len(factors)} "
                f"factors {tuple(factors)}: give one factor per drop"
            )
        if list(at) != sorted(at) or not all(0 < a < 1 for a in at):
            raise ValueError(
                f"at={tuple(at)}: give increasing fractions of the run, "
                "each between 0 and 1"
            )
        for factor in factors:
            _check_fraction("factor", factor)
        self.warmup = warmup
        self.at = tuple(at)
        self.factors = tuple(factors)

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        if step < self.warmup:
            return _warm(step, self.warmup, base_lr)
        factor = 1.0
        for fraction, drop in zip(self.at, self.factors):
            if step >= round(fraction * steps):
                factor = drop
        return base_lr * factor

    def __repr__(self) -> str:
        return (
            f"StepDecay(warmup={self.warmup}, at={self.at}, "
            f"factors={self.factors})"
        )


# Decay shapes for WSD: the fraction of the peak at ``progress`` through
# the decay, from 1 at its first step toward 0 one step after its last.
# Module-level functions, so that a WSD holding one can be pickled.


def linear(progress: float) -> float:
    """A straight line: MiniCPM's and Hägele et al.'s default."""
    return 1.0 - progress


def one_minus_sqrt(progress: float) -> float:
    """Drops fastest at the start of the decay; Hägele et al. found it
    ahead of the straight line."""
    return 1.0 - math.sqrt(progress)


def cosine(progress: float) -> float:
    """Half a cosine: slow at both ends of the decay."""
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class WSD:
    """Warmup-stable-decay: warm-up, the peak held, then a decay over the
    last ``decay`` fraction of the run in the given ``shape``.

    Until the decay begins it equals :class:`Constant`, so one constant run
    with checkpoints gives every budget: branch a decay from the
    checkpoint at 80% of each budget.
    """

    def __init__(
        self,
        warmup: int = 40,
        decay: float = 0.2,
        shape: Callable[[float], float] = linear,
    ):
        _check_warmup(warmup)
        if not 0.0 < decay <= 1.0:
            raise ValueError(
                f"decay={decay} is the fraction of the run spent decaying: "
                "give a value above 0 and at most 1"
            )
        self.warmup = warmup
        self.decay = decay
        self.shape = shape

    def decay_steps(self, steps: int) -> int:
        """How many of ``steps`` updates decay (at least one)."""
        return max(1, round(self.decay * steps))

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        decay = self.decay_steps(steps)
        if self.warmup + decay > steps:
            raise ValueError(
                f"{self!r} over {steps} steps: a warm-up of {self.warmup} "
                f"and a decay of {decay} steps do not fit in the run; "
                "shorten the warm-up or the decay, or lengthen the run"
            )
        if step < self.warmup:
            return _warm(step, self.warmup, base_lr)
        start = steps - decay
        if step < start:
            return base_lr
        return base_lr * self.shape((step - start) / decay)

    def __repr__(self) -> str:
        return (
            f"WSD(warmup={self.warmup}, decay={self.decay}, "
            f"shape={self.shape.__name__})"
        )


class InverseSqrt:
    """The original Transformer's schedule: warm-up, then the peak times
    ``sqrt(warmup / (step + 1))``, which never ends, so it needs no run
    length (Vaswani et al., 2017, with the peak in place of
    ``d_model ** -0.5 * warmup ** -0.5``)."""

    def __init__(self, warmup: int = 40):
        if warmup < 1:
            raise ValueError(
                f"warmup={warmup}: the decay is measured from the end of "
                "the warm-up; give at least 1 step"
            )
        self.warmup = warmup

    def __call__(self, step: int, steps: int, base_lr: float) -> float:
        if step < self.warmup:
            return _warm(step, self.warmup, base_lr)
        return base_lr * math.sqrt(self.warmup / (step + 1))

    def __repr__(self) -> str:
        return f"InverseSqrt(warmup={self.warmup})"
