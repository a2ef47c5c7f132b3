"""The figure helpers a chapter calls instead of drawing in its own cell
(mlexp/evidence/figures.py): what a reader reads off the figure."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import pytest  # noqa: E402

from mlexp.evidence import figures  # noqa: E402
from mlexp.evidence.style import PALETTE  # noqa: E402

LOSSES = {"full model": 1.74, "no attention": 2.49, "no residual": 3.35}


def test_loss_bars_reads_top_down_and_marks_the_reference():
    ax = figures.loss_bars(LOSSES, "full model", "loss", "ablation")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[::-1] == list(LOSSES)  # the first model at the top
    bars = {label: bar for label, bar in zip(labels, ax.patches)}
    assert [round(bars[n].get_width(), 2) for n in LOSSES] == list(LOSSES.values())
    blue = mcolors.to_rgba(PALETTE["blue"])
    assert [bars[n].get_facecolor() == blue for n in LOSSES] == [True, False, False]
    (line,) = ax.get_lines()  # the reference's loss, carried across
    assert set(line.get_xdata()) == {LOSSES["full model"]}
    assert sorted(t.get_text() for t in ax.texts) == ["1.74", "2.49", "3.35"]


def test_loss_bars_needs_a_reference_among_the_models():
    with pytest.raises(ValueError, match="name the model the others are read"):
        figures.loss_bars(LOSSES, "baseline", "loss", "ablation")


def test_training_curves_draw_both_losses_against_the_step():
    history = {"step": [0, 10, 20], "train": [4.0, 3.0, 2.0], "val": [4.1, 3.2, 2.4]}
    ax = figures.training_curves(history, "run")
    curves = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert curves == {"train": history["train"], "validation": history["val"]}
    assert ax.get_xlabel() == "training step"
