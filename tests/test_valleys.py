"""Chapter 9's toy valleys: the losses are what their docstrings say, and the descent is the
textbook one (on a quadratic, plain gradient descent shrinks each direction by 1 - lr * c)."""

import math

import pytest
import torch

from mlexp.valleys import Rosenbrock, ThinValley, best_rate, descend


def sgd(params, lr):
    return torch.optim.SGD(params, lr)


@pytest.mark.parametrize("angle", [0.0, 45.0, 30.0])
def test_the_thin_valley_has_its_curvatures_along_its_turned_axes(angle):
    valley = ThinValley(curvatures=(1.0, 1000.0), angle=angle)
    hessian = torch.autograd.functional.hessian(valley, torch.zeros(2, dtype=torch.float64))
    curvatures, directions = torch.linalg.eigh(hessian)
    assert torch.allclose(curvatures, torch.tensor([1.0, 1000.0], dtype=torch.float64))
    floor = torch.tensor([math.cos(math.radians(angle)), math.sin(math.radians(angle))])
    assert abs(float(directions[:, 0] @ floor.double())) == pytest.approx(1.0)


def test_plain_descent_on_the_valley_shrinks_each_direction_by_one_minus_lr_c():
    valley = ThinValley(curvatures=(1.0, 1000.0), angle=45.0)
    lr, steps = 1e-3, 7
    path = descend(valley, sgd, lr, steps, valley.start)
    along_across = path @ valley.axes  # each point in the valley's own axes
    expected = torch.tensor([-1.0, 0.1], dtype=torch.float64) * torch.tensor(
        [(1 - lr * 1.0) ** steps, (1 - lr * 1000.0) ** steps], dtype=torch.float64)
    assert torch.allclose(along_across[-1], expected)
    assert path.shape == (steps + 1, 2)
    assert path[0].tolist() == pytest.approx(valley.start)


def test_rosenbrock_is_zero_and_flat_at_its_minimum_only():
    w = torch.tensor([1.0, 1.0], dtype=torch.float64, requires_grad=True)
    loss = Rosenbrock()(w)
    loss.backward()
    assert loss.item() == 0 and w.grad.abs().max() == 0
    assert Rosenbrock()(torch.tensor(Rosenbrock.start)).item() > 0


def test_best_rate_picks_the_rate_that_ends_lowest_and_skips_divergent_ones():
    valley = ThinValley(curvatures=(1.0, 1000.0))
    # above 2 / 1000 the steep direction grows each step; 10 overflows to inf
    rates = [1e-4, 1e-3, 1.9e-3, 10.0]
    lr, path, final = best_rate(valley, sgd, rates, 50, valley.start)
    assert lr == 1.9e-3
    assert final == pytest.approx(valley(path[-1]).item())
    assert final < min(valley(descend(valley, sgd, r, 50, valley.start)[-1]).item()
                       for r in (1e-4, 1e-3))


def test_bad_arguments_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="positive"):
        ThinValley(curvatures=(0.0, 1.0))
    with pytest.raises(ValueError, match="smaller rates"):
        best_rate(ThinValley(curvatures=(1.0, 1000.0)), sgd, [100.0], 200, (1.0, 1.0))
