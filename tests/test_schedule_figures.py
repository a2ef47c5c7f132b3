"""Chapter 10's figure helpers (mlexp/evidence/schedule_figures.py): what a reader reads off them."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from mlexp.evidence import schedule_figures  # noqa: E402
from mlexp.schedules import WSD, Constant, WarmupCosine  # noqa: E402


def test_smooth_is_the_mean_of_the_last_values():
    assert schedule_figures.smooth([1, 2, 3, 4, 5], width=2).tolist() == [1, 1.5, 2.5, 3.5, 4.5]


def test_rates_draws_each_schedule_as_a_share_of_the_peak():
    shown = {"constant": Constant(4), "cosine": WarmupCosine(4), "WSD": WSD(4)}
    fig = schedule_figures.rates(shown, 50, 3e-3)
    lines = {line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()}
    assert list(lines) == list(shown)
    for name, schedule in shown.items():
        assert list(lines[name]) == pytest.approx([schedule(s, 50, 3e-3) / 3e-3 for s in range(50)])


def test_budgets_marks_each_branch_and_each_separate_run_at_its_budget():
    trunk = {"step": [0, 50, 100], "val": [4.0, 2.5, 2.3]}
    fig = schedule_figures.budgets(trunk, {50: 2.4, 100: 2.1}, {50: 2.42, 100: 2.12})
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in fig.axes[0].get_lines()}
    assert lines["constant rate"] == ([50, 100], [2.5, 2.3])  # the start, at the uniform guess, left out
    assert lines["a 20% decay branched from it"] == ([50, 100], [2.4, 2.1])
    assert lines["a separate cosine run"] == ([50, 100], [2.42, 2.12])


def test_warmup_grid_has_a_panel_per_warmup_and_a_line_per_peak():
    history = {"batch_loss": torch.linspace(4, 2, 120).tolist()}
    grid = {(p, w): history for p in (3e-3, 1e-1) for w in (0, 40)}
    fig = schedule_figures.warmup_grid(grid)
    assert [ax.get_title() for ax in fig.axes] == ["no warm-up", "40 warm-up steps"]
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2]
    assert len(fig.axes[0].get_lines()[0].get_ydata()) == 60  # the first 60 steps, where spikes come


def test_schedule_losses_draws_a_branch_from_where_it_branches_and_every_eighth_step():
    trunk = {"batch_loss": torch.linspace(4, 2, 100).tolist(), "step": [0, 50, 100], "val": [4.0, 3.0, 2.0]}
    branch = {"batch_loss": trunk["batch_loss"][80:], "step": [80, 100], "val": [2.5, 2.0]}  # from step 80 on
    fig = schedule_figures.schedule_losses({"trunk": trunk, "branch": branch}, zoom=(60, 100), trunk=trunk)
    whole, near = fig.axes
    (trunk_line, branch_line) = whole.get_lines()
    assert list(trunk_line.get_xdata()) == list(range(0, 100, 8))
    assert list(branch_line.get_xdata()) == list(range(80, 100, 8))  # the shared steps drawn once
    assert list(branch_line.get_ydata()) == pytest.approx(schedule_figures.smooth(trunk["batch_loss"])[80::8].tolist())
    near_lines = near.get_lines()
    assert list(near_lines[0].get_xdata()) == list(range(60, 100, 8))
    assert list(near_lines[2].get_xdata()) == list(range(80, 100, 8))
    assert list(near_lines[1].get_xdata()) == [100]  # validation dots inside the zoom only
    assert list(near_lines[3].get_xdata()) == [80, 100]


def test_river_draws_every_fourth_step_of_each_walk_and_the_floors():
    walk = {"along": torch.linspace(1, 0.1, 40, dtype=torch.float64), "across": torch.full((40,), 0.5, dtype=torch.float64)}
    fig = schedule_figures.river({"constant 1": walk, "decayed": walk}, {"constant 1": 0.5})
    lines = fig.axes[0].get_lines()
    walks = [line for line in lines if line.get_label() in ("constant 1", "decayed")]
    assert [list(line.get_xdata()) for line in walks] == [list(range(0, 40, 4))] * 2
    assert list(walks[0].get_ydata()) == pytest.approx((walk["along"] + walk["across"])[::4].tolist())
    assert [line.get_ydata()[0] for line in lines if line.get_linestyle() == "--"] == [0.5]  # one floor
