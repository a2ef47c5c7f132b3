"""Reading a learning-rate sweep: the best rate and the range of rates within a band of it."""

import math

import pytest

from mlexp.training.sweeps import good_range


def test_the_range_is_read_between_rates_on_a_log_axis():
    # best 1.0 at 0.01; the line from 0.01 (1.0) to 0.1 (1.2) crosses 1.05 a quarter of the way
    # along in log rate, and the line to 0.001 (1.1) crosses it half way
    lr, low, high = good_range({0.001: 1.1, 0.01: 1.0, 0.1: 1.2}, band=0.05)
    assert lr == 0.01
    assert math.log10(high) == pytest.approx(-2 + 0.25)
    assert math.log10(low) == pytest.approx(-2 - 0.5)


def test_rates_inside_the_band_extend_the_range_and_the_sweep_bounds_it():
    losses = {1e-4: 1.04, 1e-3: 1.02, 1e-2: 1.0, 1e-1: 1.2}
    lr, low, high = good_range(losses, band=0.05)
    assert (lr, low) == (1e-2, 1e-4)  # good up to the sweep's lowest rate, which bounds it
    assert math.log10(high) == pytest.approx(-2 + 0.25)


def test_a_diverged_neighbour_ends_the_range_at_the_last_good_rate():
    lr, low, high = good_range({0.01: 1.0, 0.1: float("nan"), 0.001: 1.5}, band=0.05)
    assert (lr, high) == (0.01, 0.01)
    assert low == pytest.approx(10 ** (-2 - 0.1))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="two rates"):
        good_range({0.1: 1.0}, band=0.05)
    with pytest.raises(ValueError, match="positive"):
        good_range({0.1: 1.0, 0.2: 1.1}, band=0.0)
