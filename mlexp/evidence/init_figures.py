"""Chapter 11's figures, one call each.

Kept apart from the figures other chapters load, so that redrawing one of
these runs only Chapter 11 again (see :mod:`mlexp.evidence.provenance`).
Each function draws a new figure in the book's style and returns it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from .style import PALETTE

__all__ = ["signal", "first_look", "sweep", "coordinates"]

COLOURS = ["blue", "green", "orange", "purple", "red", "grey", "ink"]


def signal(
    results: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]],
    activation: str = "ReLU",
) -> plt.Figure:
    """Left, the activations' root mean square after each layer of a deep
    stack, one line per initialization, on a log axis; right, the
    gradient's on the way back. ``results[init][activation]`` holds
    :func:`mlexp.initialization.signal`'s lists."""
    fig, (fwd, back) = plt.subplots(1, 2, figsize=(8.6, 3.2), sharey=True)
    for (name, by_act), colour in zip(results.items(), COLOURS):
        r = by_act[activation]
        layers = range(1, len(r["activations"]) + 1)
        fwd.plot(
            layers, r["activations"], color=PALETTE[colour], label=name
        )
        back.plot(layers, r["gradients"], color=PALETTE[colour])
    fwd.set(xlabel="layer", ylabel="root mean square", yscale="log")
    fwd.set_title(f"activations ({activation})", fontsize=9)
    back.set(xlabel="layer")
    back.set_title("gradients, on the way back", fontsize=9)
    fwd.legend(fontsize=7)
    fig.tight_layout()
    return fig


def first_look(profiles: Mapping[str, Mapping[str, Sequence[float]]]):
    """The residual stream's root mean square after each block at step 0,
    one line per initialization, on a log axis."""
    fig, ax = plt.subplots(figsize=(6.2, 3.0))
    for (name, p), colour in zip(profiles.items(), COLOURS):
        blocks = range(1, len(p["stream"]) + 1)
        ax.plot(blocks, p["stream"], "o-", ms=3, color=PALETTE[colour])
        ax.annotate(
            name,
            (len(p["stream"]), p["stream"][-1]),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
            color=PALETTE[colour],
        )
    ax.set(xlabel="block", ylabel="stream's root mean square")
    ax.set_yscale("log")
    ax.margins(x=0.25)
    fig.tight_layout()
    return fig


def sweep(
    losses: Mapping[str, Mapping[int, Mapping[float, float]]],
    best: Mapping[str, Mapping[int, float]],
) -> plt.Figure:
    """Validation loss against the learning rate, one panel per
    parameterization and one line per width, with each width's fitted
    best rate marked by a dotted line. ``losses[param][width][rate]``."""
    fig, axes = plt.subplots(
        1, len(losses), figsize=(8.6, 3.4), sharey=True
    )
    for ax, (param, by_width) in zip(axes, losses.items()):
        for (width, curve), colour in zip(by_width.items(), COLOURS):
            rates = sorted(curve)
            ax.plot(
                rates,
                [curve[r] for r in rates],
                "o-",
                ms=3,
                color=PALETTE[colour],
                label=f"width {width}",
            )
            ax.axvline(best[param][width], ls=":", color=PALETTE[colour])
        ax.set(xscale="log", xlabel="learning rate (base)", title=param)
    axes[0].set_ylabel("validation loss")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def coordinates(
    records: Mapping[str, Mapping[int, Sequence[Mapping[str, float]]]],
    layers: Sequence[str],
) -> plt.Figure:
    """Each layer's mean absolute output against the width, one panel per
    parameterization and layer, one line per step (darker: later).
    ``records[param][width]`` is a run's list of per-step measures."""
    fig, axes = plt.subplots(
        len(records),
        len(layers),
        figsize=(8.6, 2.3 * len(records)),
        sharex=True,
        squeeze=False,
    )
    for row, (param, by_width) in zip(axes, records.items()):
        widths = sorted(by_width)
        n_steps = len(by_width[widths[0]])
        for ax, layer in zip(row, layers):
            for t in range(n_steps):
                ax.plot(
                    widths,
                    [by_width[w][t][layer] for w in widths],
                    "o-",
                    ms=2.5,
                    lw=1,
                    color=PALETTE["blue"],
                    alpha=0.25 + 0.75 * t / max(1, n_steps - 1),
                    label=f"step {t}",
                )
            ax.set(xscale="log", yscale="log")
            ax.set_xticks(widths, [str(w) for w in widths])
            ax.minorticks_off()
            ax.set_title(f"{param}: {layer}", fontsize=8)
        row[0].set_ylabel("mean |output|")
    for ax in axes[-1]:
        ax.set_xlabel("width")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig
