"""Chapter 9's figures, one call each.

Kept apart from the figures other chapters load, so that redrawing one of
these runs only Chapter 9 again (see :mod:`mlexp.evidence.provenance`).
Each function draws a new figure in the book's style and returns it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from .style import PALETTE

__all__ = ["valley_paths", "rate_sweep", "embedding_sizes", "update_ratios"]

COLOURS = ["blue", "orange", "green", "purple", "red", "grey"]


def valley_paths(
    valleys: Mapping[str, tuple[Callable, Mapping[str, torch.Tensor]]],
) -> plt.Figure:
    """One panel per valley: its contours, and each optimizer's path at its
    best rate, the start marked by a dot (the contours halve the loss, from
    the start's inward)."""
    fig, axes = plt.subplots(
        1, len(valleys), figsize=(3.2 * len(valleys), 3.3)
    )
    for ax, (title, (loss, paths)) in zip(axes, valleys.items()):
        points = torch.cat(list(paths.values()))
        finite = points[torch.isfinite(points).all(-1)]
        low, high = finite.min(0).values, finite.max(0).values
        pad = 0.15 * (high - low).max()
        x = torch.linspace(float(low[0] - pad), float(high[0] + pad), 120)
        y = torch.linspace(float(low[1] - pad), float(high[1] + pad), 120)
        grid = torch.stack(torch.meshgrid(x, y, indexing="xy"), -1)
        z = loss(grid.double())
        # contours at the start's loss, halved again and again
        top = float(loss(next(iter(paths.values()))[0]))
        levels = [top * 2.0**-k for k in range(14, -1, -1)]
        # drawn as an image inside the SVG: thousands of contour points
        # would otherwise make the figure half a megabyte
        ax.contour(
            x, y, z, levels=levels, colors=PALETTE["grey"], rasterized=True
        )
        for (name, path), colour in zip(paths.items(), COLOURS):
            ax.plot(
                path[:, 0],
                path[:, 1],
                lw=0.9,
                color=PALETTE[colour],
                label=name,
            )
        ax.plot(*paths[next(iter(paths))][0], "o", color=PALETTE["grey"])
        ax.set(title=title, xticks=[], yticks=[], aspect="equal")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def rate_sweep(
    sweep: Mapping[str, Mapping[float, float]], best: Mapping[str, float]
) -> plt.Figure:
    """Validation loss against the learning rate over each optimizer's
    best, one line per optimizer; a run whose loss is not finite is
    drawn at the top edge."""
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    finite = [v for r in sweep.values() for v in r.values() if v < 1e9]
    lowest, top = min(finite), min(max(finite), min(finite) + 1.5)
    for (name, runs), colour in zip(sweep.items(), COLOURS):
        rates = sorted(runs)
        ratio = [r / best[name] for r in rates]
        loss = [min(runs[r], top) for r in rates]
        ax.plot(ratio, loss, "o-", color=PALETTE[colour], label=name)
    ax.set(
        xscale="log",
        xlabel="learning rate ÷ that optimizer's best rate",
        ylabel="validation loss (nats per character)",
        ylim=(lowest - 0.05, top + 0.05),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def embedding_sizes(
    frequency: Sequence[float], sizes: Mapping[str, Sequence[float]]
) -> plt.Figure:
    """Each character's embedding row RMS against how often the character
    occurs in the training text, one series per run."""
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    markers = "os^vDx"
    for (name, rms), colour, m in zip(sizes.items(), COLOURS, markers):
        ax.plot(
            frequency, rms, m, ms=4, color=PALETTE[colour], label=name,
            alpha=0.85,
        )  # fmt: skip
    ax.set(
        xscale="log",
        xlabel="share of the training text that is this character",
        ylabel="RMS of its embedding row",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def update_ratios(
    ratios: Mapping[str, Mapping[str, float]], step: int
) -> plt.Figure:
    """Update RMS over weight RMS for every weight matrix at one update,
    one row of points per optimizer, on a log axis."""
    fig, ax = plt.subplots(figsize=(6.2, 2.2 + 0.35 * len(ratios)))
    for i, ((name, per_matrix), colour) in enumerate(
        zip(ratios.items(), COLOURS)
    ):
        values = list(per_matrix.values())
        ax.plot(values, [i] * len(values), "|", ms=14, mew=1.5,
                color=PALETTE[colour])  # fmt: skip
    ax.set_yticks(range(len(ratios)), list(ratios))
    ax.invert_yaxis()
    ax.set(
        xscale="log",
        xlabel=f"update RMS ÷ weight RMS at update {step}, per matrix",
        ylim=(len(ratios) - 0.5, -0.5),
    )
    fig.tight_layout()
    return fig
