"""Chapter 3's figures, one call each.

Kept apart from the figures other chapters load, so that redrawing one of
these runs only Chapter 3 again (see :mod:`mlexp.evidence.provenance`).
Each function draws a new figure in the book's style and returns it; the
chapter computes everything drawn in a cell the reader sees.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from torch import Tensor

from .style import PALETTE

__all__ = [
    "COLOURS",
    "loss_by_position",
    "absolute_past_trained_length",
    "largest_angles",
    "stretch_bars",
    "position_probe",
]

#: Each model's colour in every figure of the chapter.
COLOURS = {
    "none": "grey",
    "sinusoidal": "orange",
    "learned, clamped": "red",
    "RoPE": "purple",
    "ALiBi": "green",
}

#: The models the second tab compares: positions by index, and none.
ABSOLUTE = ("none", "sinusoidal", "learned, clamped")
Curve = tuple[Tensor, Tensor]  # (mean loss per run of positions, centres)
LOSS_AXES = {
    "xlabel": "position in a 256-character window",
    "ylabel": "validation loss (nats)",
}


def _curve(ax: plt.Axes, name: str, curve: Curve, suffix: str) -> None:
    """One model's line in its colour; the clamped table dashed and
    labelled with ``suffix``."""
    y, x = curve
    clamped = "clamped" in name
    ax.plot(
        x,
        y,
        color=PALETTE[COLOURS[name]],
        ls="--" if clamped else "-",
        label=name + (suffix if clamped else ""),
    )


def loss_by_position(
    curves: Mapping[str, Curve],
    reference: Mapping[str, float],
    trained: int,
    length: int,
) -> plt.Figure:
    """Step 2's figure: each model's smoothed loss by position, a vertical
    line at the trained length ``trained`` and a dotted line per model at
    its reference level, from ``trained`` to ``length``."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for name, curve in curves.items():
        _curve(ax, name, curve, " (a workaround)")
        colour = PALETTE[COLOURS[name]]
        ax.hlines(
            reference[name], trained, length, color=colour, lw=0.8, ls=":"
        )
    ax.axvline(trained, color=PALETTE["grey"], lw=1)
    top = ax.get_ylim()[1] * 0.98
    ax.text(trained + 2, top, f"T = {trained}", va="top", fontsize=9)
    ax.set(
        **LOSS_AXES,
        title="Loss by position; dotted: each model's reference",
    )
    ax.legend(fontsize=8, ncol=2)
    return fig


def absolute_past_trained_length(
    curves: Mapping[str, Curve], trained: int
) -> plt.Figure:
    """The second tab's figure: the smoothed loss by position of the two
    schemes that name positions and of the model without any (the others
    in ``curves`` are left out), with a line at ``trained``."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for name in ABSOLUTE:
        _curve(ax, name, curves[name], "")
    ax.axvline(trained, color=PALETTE["grey"], lw=1)
    ax.set(**LOSS_AXES, title="Absolute positions past the trained length")
    ax.legend(fontsize=8)
    return fig


def largest_angles(
    trained: Tensor,
    reach: Mapping[str, Tensor],
    kept: Mapping[str, Tensor],
    met_all: Tensor,
) -> plt.Figure:
    """Step 3's angles, on a log scale: each pair's largest angle in
    training (``trained``) and read at four times the length in each way
    (``reach``), a dot where a pair goes past the angles it met (not
    ``kept``), the pairs that ``met_all`` shaded, a line at one turn."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    pairs = torch.arange(len(trained))
    ax.axvspan(
        -0.5, int(met_all.sum()) - 0.5, color=PALETTE["light"], alpha=0.5
    )
    ax.text(
        0, 2e-2, "every angle\nmet in training", fontsize=8, va="bottom"
    )
    ax.plot(
        pairs,
        trained,
        color=PALETTE["ink"],
        lw=6,
        alpha=0.25,
        label="training: distances below T",
    )
    colours = {
        "RoPE as trained": "purple",
        "interpolation": "orange",
        "NTK-aware": "blue",
    }
    for way, colour in colours.items():
        ax.plot(
            pairs,
            reach[way],
            color=PALETTE[colour],
            ls="--" if way == "interpolation" else "-",
            label=f"{way}: below 4T",
        )
        past = ~kept[
            way
        ]  # a dot where the pair goes past its trained angles
        ax.plot(pairs[past], reach[way][past], "o", color=PALETTE[colour])
    ax.axhline(2 * math.pi, color=PALETTE["grey"], lw=0.8, ls=":")
    ax.text(
        len(pairs) - 0.5, 2 * math.pi * 1.2, "one full turn", ha="right"
    )
    ax.set(
        yscale="log",
        xlabel="channel pair i, fastest first",
        ylabel="largest angle (radians)",
        title="Largest angle per pair; dots: past the angles met in "
        "training",
    )
    ax.legend(fontsize=8, loc="upper right")
    return fig


def stretch_bars(stretch: Mapping[str, tuple[float, float]]) -> plt.Figure:
    """The third tab's figure: for each way of reading the RoPE model, its
    loss inside the trained length and past it (``stretch`` maps a name to
    the pair), top to bottom in the order given."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(stretch)
    y = range(len(names))
    ax.barh(
        [i + 0.2 for i in y],
        [stretch[n][1] for n in names],
        height=0.4,
        color=PALETTE["purple"],
        label="past T: [T, 4T)",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [stretch[n][0] for n in names],
        height=0.4,
        color=PALETTE["grey"],
        label="inside T: [0, T)",
    )
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set(xlabel="validation loss (nats)", title="Stretching RoPE to 4T")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def position_probe(
    r2: Mapping[str, Sequence[float]],
    guess: Tensor,
    log_guess: Tensor,
    trained: int,
) -> plt.Figure:
    """Step 5's two panels. Left, each model's probe R² after the
    embedding and after each block (``r2``, three models). Right, the
    no-position model's mean guesses past the trained length from the two
    probes (``guess``, ``log_guess``), beside the diagonal of perfect
    guesses and a line at ``trained``."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.3))
    for (name, scores), colour in zip(
        r2.items(), ("purple", "grey", "red")
    ):
        left.plot(
            range(len(scores)),
            scores,
            marker="o",
            color=PALETTE[colour],
            label=name,
        )
    layers = len(next(iter(r2.values())))
    left.set(
        xticks=range(layers),
        xticklabels=["emb."] + [f"{i + 1}" for i in range(layers - 1)],
        xlabel="after the embedding, then block",
        ylabel="R² of the probe",
        title="Where position can be read",
    )
    left.axhline(0, color=PALETTE["grey"], lw=0.8)
    left.legend(fontsize=8)
    length = len(guess)
    right.plot(
        range(length), guess, color=PALETTE["purple"], label="of position"
    )
    right.plot(
        range(length),
        log_guess,
        color=PALETTE["blue"],
        ls="--",
        label="of log(position + 1)",
    )
    right.plot([0, length], [0, length], color=PALETTE["grey"], ls=":")
    right.axvline(trained, color=PALETTE["grey"], lw=1)
    top = max(length, guess.max().item(), log_guess.max().item()) + 10
    right.set(
        xlabel="true position",
        ylabel="probe's guess",
        ylim=(-10, top),
        title="NoPE past T (last block)",
    )
    right.legend(
        fontsize=8, title="probe", title_fontsize=8, loc="upper left"
    )
    return fig
