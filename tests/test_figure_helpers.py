"""The figure helpers a chapter calls instead of drawing in its own cell
(mlexp/evidence/figures.py, and Chapter 3's mlexp/evidence/position_figures.py): what a
reader reads off the figure."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mlexp.evidence import figures, position_figures  # noqa: E402
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


# Chapter 2's figures (mlexp/evidence/tokenization_figures.py)
from mlexp.evidence import tokenization_figures  # noqa: E402


def test_bytes_per_char_draws_one_bar_per_language():
    per_char = {"English": 1.0, "Greek": 1.8, "emoji": 3.6}
    ax = tokenization_figures.bytes_per_char(per_char).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(per_char)
    assert [bar.get_height() for bar in ax.patches] == list(per_char.values())
    assert ax.get_ylabel() == "UTF-8 bytes per character"


def test_compression_draws_each_tokenizer_against_the_vocabulary_size():
    sizes = [256, 512, 1024, 2048]
    curves = {"pre-split": [1.0, 1.9, 2.2, 2.5], "no pre-split": [1.0, 2.0, 2.4, 2.8]}
    ax = tokenization_figures.compression(sizes, curves).axes[0]
    drawn = {line.get_label(): line for line in ax.get_lines()}
    assert set(drawn) == set(curves)
    for name, values in curves.items():
        assert list(drawn[name].get_xdata()) == sizes
        assert list(drawn[name].get_ydata()) == values
        colour = tokenization_figures.SPLIT_COLOURS[name]
        assert mcolors.to_rgba(drawn[name].get_color()) == mcolors.to_rgba(PALETTE[colour])
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "1,024"]


def test_race_bars_carry_each_run_and_the_curves_its_points():
    bits = {"characters": 2.384, "BPE 512": 2.251, "BPE 2048": 2.211}
    points = {run: ([1.0, 2.0], [b + 0.5, b]) for run, b in bits.items()}
    left, right = tokenization_figures.race(bits, points).axes
    labels = [t.get_text() for t in left.get_yticklabels()]
    assert labels[::-1] == list(bits)  # the first run at the top
    assert {n: bar.get_width() for n, bar in zip(labels, left.patches)} == bits
    assert sorted(t.get_text() for t in left.texts) == ["2.211", "2.251", "2.384"]
    curves = {line.get_label(): list(line.get_ydata()) for line in right.get_lines()}
    assert curves == {run: ys for run, (_, ys) in points.items()}
    assert right.get_xlabel() == "training text read (millions of characters)"


def test_embedding_map_places_and_labels_every_character_by_kind():
    import torch

    chars = ["a", "B", " ", "\n"]
    kinds = ["lower case", "upper case", "white space", "white space"]
    xy = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [3.0, 1.0]])
    maps = {t: (xy, torch.tensor([0.5, 0.25, 0.25])) for t in ("embed", "head")}
    fig = tokenization_figures.embedding_map(maps, chars, kinds)
    for ax in fig.axes:
        assert sorted(t.get_text() for t in ax.texts) == sorted(["a", "B", "␣", "⏎"])
        placed = {t.get_text(): tuple(t.xy) for t in ax.texts}
        assert placed["⏎"] == (3.0, 1.0)
        assert ax.get_xlabel() == "1st principal direction (50% of variance)"
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend == ["lower case", "upper case", "white space"]  # kinds present only

# Chapter 3: five models' smoothed losses by position (runs of 8 over 32 positions), T = 16.
T, LONG = 16, 32
CENTRES = torch.arange(0, LONG, 8) + 3.5
CURVES = {name: (torch.tensor([3.0, 2.0, 2.0 + i, 2.5 + i]), CENTRES)
          for i, name in enumerate(position_figures.COLOURS)}
REFERENCE = {name: 2.0 for name in CURVES}


def colour_of(line) -> tuple:
    return mcolors.to_rgba(line.get_color())


def test_loss_by_position_draws_each_curve_in_its_colour_with_its_reference():
    fig = position_figures.loss_by_position(CURVES, REFERENCE, T, LONG)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == {"none", "sinusoidal", "learned, clamped (a workaround)", "RoPE", "ALiBi"}
    for name, (y, x) in CURVES.items():
        line = lines[name + (" (a workaround)" if "clamped" in name else "")]
        assert list(line.get_ydata()) == y.tolist() and list(line.get_xdata()) == x.tolist()
        assert colour_of(line) == mcolors.to_rgba(PALETTE[position_figures.COLOURS[name]])
    assert lines["learned, clamped (a workaround)"].get_linestyle() == "--"
    # one dotted reference per model, from T to the window's end, at its level
    references = ax.collections
    assert len(references) == len(CURVES)
    for segments in (c.get_segments() for c in references):
        (((x0, y0), (x1, y1)),) = segments
        assert (x0, x1, y0, y1) == (T, LONG, 2.0, 2.0)
    assert [t.get_text() for t in ax.texts] == [f"T = {T}"]
    assert ax.get_ylabel() == "validation loss (nats)"
    plt.close(fig)


def test_the_second_tab_shows_the_absolute_schemes_and_none_only():
    fig = position_figures.absolute_past_trained_length(CURVES, T)
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["none", "sinusoidal", "learned, clamped"]
    (vertical,) = [line for line in ax.get_lines() if line.get_label().startswith("_")]
    assert set(vertical.get_xdata()) == {T}
    plt.close(fig)


def test_largest_angles_marks_the_pairs_past_their_trained_angles():
    trained = torch.tensor([8.0, 2.0, 0.5])
    reach = {"RoPE as trained": 4 * trained, "interpolation": trained.clone(),
             "NTK-aware": torch.tensor([32.0, 4.0, 0.5])}
    kept = {way: torch.tensor([True, r[1] <= 2.0, r[2] <= 0.5]) for way, r in reach.items()}
    fig = position_figures.largest_angles(trained, reach, kept, trained >= 2 * torch.pi)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["training: distances below T"].get_ydata()) == trained.tolist()
    for way, r in reach.items():
        assert list(lines[f"{way}: below 4T"].get_ydata()) == r.tolist()
    dots = [list(line.get_xdata()) for line in ax.get_lines() if line.get_marker() == "o"]
    assert dots == [[1, 2], [], [1]]  # pair 0 turned fully round in training: never past
    assert ax.get_yscale() == "log"
    plt.close(fig)


def test_stretch_bars_pair_each_way_inside_and_past_the_trained_length():
    stretch = {"RoPE as trained": (1.70, 2.55), "NTK-aware": (1.72, 2.08)}
    fig = position_figures.stretch_bars(stretch)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == list(stretch)
    widths = [round(bar.get_width(), 2) for bar in ax.patches]
    assert widths == [2.55, 2.08, 1.70, 1.72]  # past T first, then inside T
    assert ax.yaxis_inverted()  # the first way at the top
    plt.close(fig)


def test_position_probe_draws_each_models_r2_and_the_guesses_past_t():
    r2 = {"NoPE": [0.0, 0.5, 0.8], "NoPE, untrained": [0.0, 0.0, 0.1], "learned table": [1.0, 0.9, 0.9]}
    guess, log_guess = torch.linspace(0, 40, LONG), torch.linspace(0, 60, LONG)
    fig = position_figures.position_probe(r2, guess, log_guess, T)
    left, right = fig.axes
    assert {line.get_label(): list(line.get_ydata()) for line in left.get_lines()
            if not line.get_label().startswith("_")} == r2
    assert [t.get_text() for t in left.get_xticklabels()] == ["emb.", "1", "2"]
    drawn = {line.get_label(): list(line.get_ydata()) for line in right.get_lines()}
    assert drawn["of position"] == guess.tolist()
    assert drawn["of log(position + 1)"] == log_guess.tolist()
    plt.close(fig)
