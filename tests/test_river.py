"""Chapter 10's toy valley (mlexp/river.py): the noise floor it predicts, and the walk."""

import math

import pytest
import torch

from mlexp.river import noise_floor, river_walk
from mlexp.schedules import WSD, Constant


def test_the_noise_floor_is_the_stationary_loss_of_a_long_walk():
    # an independent estimate: one walker's loss averaged over many steps after it settled
    g = torch.Generator().manual_seed(0)
    for rate, curvature in [(1.0, 1.0), (0.1, 1.0), (0.5, 2.0)]:
        y, total, n = 0.0, 0.0, 200_000
        noise = torch.randn(n + 1000, generator=g, dtype=torch.float64).tolist()
        for i, z in enumerate(noise):
            y = y - rate * (curvature * y + 0.7 * z)
            if i >= 1000:
                total += curvature * y * y / 2
        assert total / n == pytest.approx(noise_floor(rate, curvature, 0.7), rel=0.03)


def test_a_walk_without_noise_shrinks_by_one_minus_rate_times_curvature_each_step():
    walk = river_walk(Constant(warmup=0), 0.5, 20, along=0.1, across=1.0, noise=0.0, walkers=3)
    x = 10.0 * (1 - 0.5 * 0.1) ** torch.arange(1, 21, dtype=torch.float64)
    assert torch.allclose(walk["along"], 0.1 * x**2 / 2)
    assert torch.all(walk["across"] == 0)


def test_a_constant_rate_settles_at_its_floor_and_a_decay_goes_below_it():
    g = torch.Generator().manual_seed(1)
    steady = river_walk(Constant(warmup=0), 1.0, 400, generator=g)
    assert steady["across"][200:].mean().item() == pytest.approx(noise_floor(1.0, 1.0, 1.0), rel=0.05)
    decayed = river_walk(WSD(warmup=0, decay=0.2), 1.0, 400, generator=g)
    assert decayed["across"][-1] < 0.2 * noise_floor(1.0, 1.0, 1.0)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="only settles when rate \\* curvature lies between 0 and 2"):
        noise_floor(2.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="both curvatures must be positive"):
        river_walk(Constant(0), 0.1, 10, along=0.0)
    assert math.isfinite(noise_floor(1.9, 1.0, 1.0))
