"""Chapter 8's figures, one call each.

Kept apart from :mod:`mlexp.evidence.figures`, which Chapter 1 loads, so
that redrawing one of these runs only Chapter 8 again (see
:mod:`mlexp.evidence.provenance`). Each function draws a new figure in the
book's style and returns it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from .style import PALETTE

__all__ = ["gradient_push", "ladder_bars", "log_z_traces", "reliability"]

COLOURS = ["blue", "orange", "green", "purple", "red", "grey"]


def ladder_bars(ladder: Mapping[str, float], ours: str) -> plt.Figure:
    """The baselines as horizontal bars in nats per character, read down
    the ladder, with bits on a second axis; the bar ``ours`` stands out."""
    names = list(ladder)
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(names) + 1.2))
    colours = [
        PALETTE["orange"] if n == ours else PALETTE["blue"] for n in names
    ]
    ax.barh(range(len(names)), [ladder[n] for n in names], color=colours)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()  # the ladder read downward, as the table prints it
    for i, n in enumerate(names):
        ax.text(ladder[n], i, f" {ladder[n]:.2f}", va="center", fontsize=8)
    ax.set(xlabel="nats per character (lower is better)")
    ax.set_xlim(0, max(ladder.values()) * 1.12)
    bits = ax.secondary_xaxis(
        "top",
        functions=(lambda x: x / math.log(2), lambda b: b * math.log(2)),
    )
    bits.set_xlabel("bits per character")
    fig.tight_layout()
    return fig


def gradient_push(
    p: Sequence[float], pushes: Mapping[str, Sequence[float]]
) -> plt.Figure:
    """How hard each objective pushes the target's logit up, against the
    probability the model gave the target."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for (name, push), colour in zip(pushes.items(), COLOURS):
        ax.plot(p, push, "o-", color=PALETTE[colour], label=name)
    ax.set(
        xscale="log",
        xlabel="probability given to the right character",
        ylabel="push on its logit, |∂loss/∂z|",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def reliability(bins: Mapping[str, Sequence[tuple]]) -> plt.Figure:
    """Accuracy against confidence, one line per model, from the bins of
    :func:`mlexp.calibration.calibration`; the diagonal is calibrated."""
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    ax.plot([0, 1], [0, 1], color=PALETTE["grey"], lw=1, ls="--")
    for (name, table), colour in zip(bins.items(), COLOURS):
        conf = [b[2] for b in table]
        acc = [b[3] for b in table]
        ax.plot(conf, acc, "o-", ms=3, color=PALETTE[colour], label=name)
    ax.set(
        xlabel="confidence (probability of the top guess)",
        ylabel="accuracy (share of top guesses right)",
        xlim=(0, 1),
        ylim=(0, 1),
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def log_z_traces(histories: Mapping[str, Mapping]) -> plt.Figure:
    """Mean log Z and the largest logit during training, from histories
    whose ``measures`` hold :class:`mlexp.loss.LogitStats`' readings."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.3))
    for (name, h), colour in zip(histories.items(), COLOURS):
        steps = [m["step"] for m in h["measures"]]
        style = "--" if "1e-4" in name or "z-loss" in name else "-"
        for ax, key in [(left, "log_z"), (right, "max_logit")]:
            values = [m[key] for m in h["measures"]]
            ax.plot(steps, values, style, color=PALETTE[colour], label=name)
    left.axhline(0, color=PALETTE["grey"], lw=1)
    left.set(xlabel="step", ylabel="mean log Z", title="The normalizer")
    right.set(xlabel="step", ylabel="largest logit", title="The logits")
    left.legend(fontsize=7)
    fig.tight_layout()
    return fig
